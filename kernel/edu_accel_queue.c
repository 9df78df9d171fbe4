// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel files and queues.
 *
 * A queue is a drm_sched entity on the device's one scheduler, so its jobs run in order and
 * queues interleave. Each file has one completion page, where every queue's slot publishes
 * its progress for userspace to read; a destroyed queue keeps its slot until its last job
 * wrote it, and its jobs not yet handed over are drained or killed without leaking.
 */
#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_managed.h>
#include <drm/drm_print.h>
#include <drm/drm_syncobj.h>
#include <linux/capability.h>
#include <linux/delay.h>
#include <linux/dma-fence-chain.h>
#include <linux/dma-mapping.h>
#include <linux/kmemleak.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include <uapi/drm/edu_accel.h>

#include "edu_accel_compat.h"
#include "edu_accel_drv.h"
#include "edu_accel_gem.h"
#include "edu_accel_hw.h"
#include "edu_accel_job.h"
#include "edu_accel_trace.h"

/* How long an exiting process's queue may take to hand its cancelled jobs over. */
#define EDU_DRAIN_TIMEOUT	(60 * HZ)

static void edu_file_release(struct kref *ref)
{
	struct edu_file *ef = container_of(ref, struct edu_file, ref);

	WARN_ON(!xa_empty(&ef->queues));
	xa_destroy(&ef->queues);
	drm_gem_object_put(&ef->completion->base);
	mutex_destroy(&ef->lock);
	edu_client_put(ef->client);
	kfree(ef);
}

static void edu_file_put(struct edu_file *ef)
{
	kref_put(&ef->ref, edu_file_release);
}

static void edu_queue_release(struct kref *ref)
{
	struct edu_queue *q = container_of(ref, struct edu_queue, ref);
	struct edu_file *ef = q->file;

	drm_gem_object_put(&q->completion->base);
	mutex_destroy(&q->submit_lock);
	kfree(q);
	edu_file_put(ef);
}

/**
 * edu_queue_put - drop a reference to a queue; the last frees it
 * @q: the queue
 */
void edu_queue_put(struct edu_queue *q)
{
	kref_put(&q->ref, edu_queue_release);
}

/* The id and completion slot go back to the file, once: no job of the queue writes it any more. */
static void edu_queue_free_slot(struct edu_queue *q)
{
	struct edu_file *ef = q->file;
	unsigned long flags;

	if (test_and_set_bit(0, &q->slot_freed))
		return;
	spin_lock_irqsave(&ef->slot_lock, flags);
	clear_bit(q->id - 1, &ef->slots_busy);
	spin_unlock_irqrestore(&ef->slot_lock, flags);
}

/**
 * edu_queue_job_retired - a job of @q wrote its completion slot for the last time (or was
 * killed unrun); a destroyed queue with no such job left gives its slot back
 * @q: the queue
 *
 * Any context, from the engine's interrupt path included.
 */
void edu_queue_job_retired(struct edu_queue *q)
{
	/* atomic_dec_and_test() is a full barrier: pairs with the one in the destroy. */
	if (atomic_dec_and_test(&q->pending) && READ_ONCE(q->dead))
		edu_queue_free_slot(q);
}

/*
 * The page of completion slots and file status. It has no GEM handle, so that GET_PARAM only
 * reads and no handle number can go stale: the file alone is allowed its mmap offset.
 */
static struct edu_bo *edu_completion_page_create(struct drm_file *file, struct edu_client *client)
{
	struct drm_edu_accel_file_status *st;
	struct edu_bo *bo;
	int ret;

	BUILD_BUG_ON(EDU_MAX_QUEUES * sizeof(struct drm_edu_accel_completion) >
		     DRM_EDU_ACCEL_FILE_STATUS_OFFSET);
	BUILD_BUG_ON(DRM_EDU_ACCEL_FILE_STATUS_OFFSET + sizeof(struct drm_edu_accel_file_status) >
		     DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE);
	BUILD_BUG_ON(DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE > PAGE_SIZE);
	bo = edu_bo_create(to_edu(file->minor->dev), client, PAGE_SIZE, true);
	if (IS_ERR(bo))
		return bo;
	st = bo->vaddr + DRM_EDU_ACCEL_FILE_STATUS_OFFSET;
	st->layout = DRM_EDU_ACCEL_COMPLETION_LAYOUT;
	ret = drm_vma_node_allow(&bo->base.vma_node, file);
	if (ret) {
		drm_gem_object_put(&bo->base);
		return ERR_PTR(ret);
	}
	return bo;
}

/**
 * edu_file_open - per-file state, with the file's completion page
 * @file: the new file
 * @client: its accounting (the file's reference passes to the state)
 *
 * Return: 0 or -ENOMEM.
 */
int edu_file_open(struct drm_file *file, struct edu_client *client)
{
	struct edu_file *ef = kzalloc(sizeof(*ef), GFP_KERNEL_ACCOUNT);

	if (!ef)
		return -ENOMEM;
	ef->completion = edu_completion_page_create(file, client);
	if (IS_ERR(ef->completion)) {
		int ret = PTR_ERR(ef->completion);

		kfree(ef);
		return ret;
	}
	kref_init(&ef->ref);
	ef->client = client;
	mutex_init(&ef->lock);
	xa_init(&ef->queues);
	spin_lock_init(&ef->slot_lock);
	atomic_set(&ef->jobs, 0);
	file->driver_priv = ef;
	return 0;
}

/*
 * Marks the queue dead so that neither a lookup nor a racing SUBMIT reaches it, and takes
 * over the file's reference. Its id and slot stay taken until its last job wrote the slot.
 */
static struct edu_queue *edu_queue_kill_locked(struct edu_file *ef, struct edu_queue *q)
{
	lockdep_assert_held(&ef->lock);
	mutex_lock(&q->submit_lock);
	WRITE_ONCE(q->dead, true);
	mutex_unlock(&q->submit_lock);
	xa_erase(&ef->queues, q->id);
	smp_mb();	/* pairs with atomic_dec_and_test() in edu_queue_job_retired() */
	if (!atomic_read(&q->pending))
		edu_queue_free_slot(q);
	return q;
}

static bool edu_queue_idle(struct edu_queue *q)
{
	rmb();	/* as drm_sched's own idle check: the count is read without a lock */
	return !spsc_queue_count(&q->entity.job_queue);
}

/*
 * 6.1's drm_sched_entity_kill_jobs() takes a reference to the entity's last scheduled fence
 * for each job it kills and drops none of them when that fence has already signalled
 * (kmemleak found such fences after every kill storm). Killed jobs only have to end after
 * that fence: once it has signalled and nothing can pop a job any more, the entity forgets
 * it, and the kill path ends the jobs at once without taking a reference. Only for an entity
 * drm_sched_entity_flush() stopped (its last user was killed): nothing picks its jobs, and
 * once a pick already under way has ended (entity_idle) its last scheduled fence is stable.
 */
static bool edu_entity_forget_last_scheduled(struct drm_sched_entity *entity)
{
	struct dma_fence *last;
	bool stopped;

	spin_lock(&entity->rq_lock);
	stopped = entity->stopped;
	spin_unlock(&entity->rq_lock);
	if (!stopped)
		return false;
	/* A single-count completion: given back for drm_sched_entity_fini()'s own wait. */
	wait_for_completion(&entity->entity_idle);
	complete(&entity->entity_idle);
	last = entity->last_scheduled;
	if (last) {
		dma_fence_wait(last, false);	/* on the engine: ends, or fails with the device */
		entity->last_scheduled = NULL;
		dma_fence_put(last);
	}
	return true;
}

/*
 * Jobs not yet handed over when their queue goes. A killed process's are ended by the kill
 * path, made leak-free above. Otherwise drm_sched_entity_destroy() waits for them to be handed
 * over (a close), or a second (an exit), and kills what is left, with that leak: so an exit,
 * or a close interrupted by a fatal signal, marks the queue cancelled instead (run_job fails
 * its jobs with -ESRCH, no DMA done) and waits for them to pass. Only a job whose in-fence
 * never signals keeps the entity busy past EDU_DRAIN_TIMEOUT and is left to the kill path.
 */
static void edu_queue_drain(struct edu_queue *q)
{
	wait_queue_head_t *wq = &q->edev->sched.job_scheduled;

	if (edu_queue_idle(q))
		return;
	if ((current->flags & PF_EXITING) && current->exit_code == SIGKILL) {
		drm_sched_entity_flush(&q->entity, 0);
		if (edu_entity_forget_last_scheduled(&q->entity))
			return;
	}
	if (!(current->flags & PF_EXITING))
		wait_event_killable(*wq, edu_queue_idle(q));
	else
		wait_event_timeout(*wq, edu_queue_idle(q), HZ);
	if (edu_queue_idle(q))
		return;
	WRITE_ONCE(q->cancel, true);
	wait_event_timeout(*wq, edu_queue_idle(q), EDU_DRAIN_TIMEOUT);
}

/* Sleeps until the entity's jobs reached the engine: never under the file's lock. */
static void edu_queue_destroy(struct edu_queue *q)
{
	edu_queue_drain(q);
	drm_sched_entity_destroy(&q->entity);
	edu_queue_put(q);
}

/**
 * edu_file_close - destroy the file's queues (their jobs still finish or are killed) and
 * drop the file's reference on its state; queues still holding jobs keep it
 * @file: the file
 */
void edu_file_close(struct drm_file *file)
{
	struct edu_file *ef = file->driver_priv;

	for (;;) {
		struct edu_queue *q, *found = NULL;
		unsigned long id;

		mutex_lock(&ef->lock);
		xa_for_each(&ef->queues, id, q) {
			if (!q->dead) {
				found = edu_queue_kill_locked(ef, q);
				break;
			}
		}
		mutex_unlock(&ef->lock);
		if (!found)
			break;
		edu_queue_destroy(found);
	}
	drm_vma_node_revoke(&ef->completion->base.vma_node, file);
	file->driver_priv = NULL;
	edu_file_put(ef);
}

/**
 * edu_file_status_page - the file's completion page, whose file status counts invalidations
 * @file: the file
 *
 * Return: the page with a new reference.
 */
struct edu_bo *edu_file_status_page(struct drm_file *file)
{
	struct edu_file *ef = file->driver_priv;

	drm_gem_object_get(&ef->completion->base);
	return ef->completion;
}

/*
 * The scheduler run queue of a uapi priority, or -EINVAL / -EACCES; DEFAULT is resolved to
 * NORMAL in place.
 */
static int edu_queue_priority(u32 *priority, enum drm_sched_priority *prio)
{
	if (*priority == DRM_EDU_ACCEL_QUEUE_PRIORITY_DEFAULT)
		*priority = DRM_EDU_ACCEL_QUEUE_PRIORITY_NORMAL;
	switch (*priority) {
	case DRM_EDU_ACCEL_QUEUE_PRIORITY_LOW:
		*prio = DRM_SCHED_PRIORITY_MIN;
		return 0;
	case DRM_EDU_ACCEL_QUEUE_PRIORITY_NORMAL:
		*prio = DRM_SCHED_PRIORITY_NORMAL;
		return 0;
	case DRM_EDU_ACCEL_QUEUE_PRIORITY_HIGH:
		/* Ahead of every other file's work: as raising a CPU priority, CAP_SYS_NICE. */
		if (!capable(CAP_SYS_NICE))
			return -EACCES;
		*prio = DRM_SCHED_PRIORITY_HIGH;
		return 0;
	default:
		return -EINVAL;
	}
}

int edu_ioctl_queue_create(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_queue_create *args = data;
	struct edu_accel_device *edev = to_edu(drm);
	struct edu_file *ef = file->driver_priv;
	struct drm_gpu_scheduler *sched = &edev->sched;
	enum drm_sched_priority prio;
	u32 priority = args->priority;
	struct edu_queue *q;
	u32 id;
	int ret;

	if (args->flags || memchr_inv(args->reserved, 0, sizeof(args->reserved)))
		return -EINVAL;
	ret = edu_queue_priority(&priority, &prio);
	if (ret)
		return ret;
	q = kzalloc(sizeof(*q), GFP_KERNEL_ACCOUNT);
	if (!q)
		return -ENOMEM;
	kref_init(&q->ref);
	q->edev = edev;
	q->file = ef;
	q->priority = priority;
	mutex_init(&q->submit_lock);
	ret = drm_sched_entity_init(&q->entity, prio, &sched, 1, NULL);
	if (ret)
		goto free;

	mutex_lock(&ef->lock);
	spin_lock_irq(&ef->slot_lock);
	id = find_first_zero_bit(&ef->slots_busy, EDU_MAX_QUEUES);
	if (id < EDU_MAX_QUEUES)
		set_bit(id, &ef->slots_busy);
	spin_unlock_irq(&ef->slot_lock);
	if (id >= EDU_MAX_QUEUES) {
		ret = -ENOSPC;
		goto unlock;
	}
	id++;
	q->id = id;
	ret = xa_insert(&ef->queues, id, q, GFP_KERNEL_ACCOUNT);
	if (ret) {
		spin_lock_irq(&ef->slot_lock);
		clear_bit(id - 1, &ef->slots_busy);
		spin_unlock_irq(&ef->slot_lock);
		goto unlock;
	}
	kref_get(&ef->ref);
	drm_gem_object_get(&ef->completion->base);
	q->completion = ef->completion;
	q->slot = (struct drm_edu_accel_completion *)ef->completion->vaddr + (id - 1);
	memset(q->slot, 0, sizeof(*q->slot));
	args->queue = id;
	args->completion_offset = (id - 1) * sizeof(struct drm_edu_accel_completion);
	mutex_unlock(&ef->lock);
	return 0;

unlock:
	mutex_unlock(&ef->lock);
	drm_sched_entity_destroy(&q->entity);
free:
	mutex_destroy(&q->submit_lock);
	kfree(q);
	return ret;
}

int edu_ioctl_queue_destroy(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_queue_destroy *args = data;
	struct edu_file *ef = file->driver_priv;
	struct edu_queue *q;

	if (args->pad)
		return -EINVAL;
	/* Under the lock debugfs walks the queues with. */
	mutex_lock(&ef->lock);
	q = xa_load(&ef->queues, args->queue);
	if (q && !q->dead)
		edu_queue_kill_locked(ef, q);
	else
		q = NULL;
	mutex_unlock(&ef->lock);
	if (!q)
		return -ENOENT;
	edu_queue_destroy(q);
	return 0;
}

