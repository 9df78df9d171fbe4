// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel queues and jobs.
 *
 * A queue is a drm_sched entity on the device's one scheduler, so its jobs run in order and
 * queues interleave. SUBMIT validates everything first, takes a reference on every BO a job
 * touches (released only when the job is freed, after its fence signalled), turns in-fences
 * into scheduler dependencies and out-syncobjs into points on the job's finished fence.
 * Completion is also published per queue in a page userspace maps read-only.
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
#include <linux/error-injection.h>
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

/*
 * Jobs the engine may hold at once: the running one and the next, which the interrupt path
 * starts as the first ends, so the engine never idles between jobs. Priorities order only
 * the jobs not yet handed over and nothing preempts the engine, so every job held here is
 * one a HIGH queue's job waits for: keep it at that. (More jobs then wait in entities when
 * a process dies: edu_queue_drain() keeps 6.1's kill path from leaking their fences.)
 */
#define EDU_SCHED_CREDITS	2

/* How long an exiting process's queue may take to hand its cancelled jobs over. */
#define EDU_DRAIN_TIMEOUT	(60 * HZ)

static unsigned int job_timeout_ms = 5000;
module_param(job_timeout_ms, uint, 0444);
MODULE_PARM_DESC(job_timeout_ms,
		 "A running job that moves no byte for this long is failed with -ETIMEDOUT (default 5000)");

static unsigned int max_jobs_per_file = 256;
module_param(max_jobs_per_file, uint, 0444);
MODULE_PARM_DESC(max_jobs_per_file,
		 "Jobs one open file may have submitted and not yet freed; SUBMIT fails with -EBUSY past it (default 256)");

static unsigned int max_job_mib = 16;
module_param(max_job_mib, uint, 0444);
MODULE_PARM_DESC(max_job_mib,
		 "Device traffic one job may carry, in MiB (H2H counts twice); SUBMIT fails with -E2BIG past it, so no job holds the one engine for long (default 16)");

static void edu_file_release(struct kref *ref)
{
	struct edu_file *ef = container_of(ref, struct edu_file, ref);

	WARN_ON(!xa_empty(&ef->queues));
	xa_destroy(&ef->queues);
	if (ef->completion)
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

static void edu_queue_put(struct edu_queue *q)
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

static struct dma_fence *edu_sched_run_job(struct drm_sched_job *sched_job)
{
	struct edu_job *job = to_edu_job(sched_job);
	struct edu_accel_device *edev = job->queue->edev;
	struct dma_fence *fence;
	int idx;

	/*
	 * A killed entity: complete in order, with that error. (A failed in-fence is looked at
	 * by the engine: a dependency on a job of this scheduler only waits for it to be
	 * scheduled, so it may not have ended yet.)
	 */
	if (sched_job->s_fence->finished.error)
		job->error = sched_job->s_fence->finished.error;
	else if (READ_ONCE(job->queue->cancel))
		job->error = -ESRCH;
	/* After unplug the registers are gone: complete without touching them. */
	if (!drm_dev_enter(&edev->drm, &idx)) {
		job->error = -ENODEV;
		return edu_engine_push(edev, job);
	}
	/*
	 * No sync for the device here: up to EDU_SCHED_CREDITS - 1 earlier jobs may still be on
	 * the engine, one of them writing what this job reads. The engine hands the job's
	 * ranges to the device when the job reaches its head (edu_job_sync_for_device()).
	 */
	fence = edu_engine_push(edev, job);
	drm_dev_exit(idx);
	return fence;
}

static enum drm_gpu_sched_stat edu_sched_timedout_job(struct drm_sched_job *sched_job)
{
	struct edu_job *job = to_edu_job(sched_job);
	struct drm_gpu_scheduler *sched = sched_job->sched;

	edu_engine_timeout(job->queue->edev, job);
	/*
	 * The scheduler took the job off its pending list for us; whether it failed now, is
	 * still moving, or finished meanwhile, it goes back so that it is freed in order
	 * (as drm_sched_stop() does with the bad job).
	 */
	spin_lock(&sched->job_list_lock);
	list_add(&sched_job->list, &sched->pending_list);
	spin_unlock(&sched->job_list_lock);
	/*
	 * If the job finished while it was off the list, the scheduler thread looked for it in
	 * vain and went back to sleep: wake it, or the job (and the pins of its BOs) waits for
	 * some later completion to be freed.
	 */
	wake_up_interruptible(&sched->wake_up_worker);
	return DRM_GPU_SCHED_STAT_NOMINAL;
}

static void edu_job_put_bos(struct edu_job *job)
{
	u32 i;

	for (i = 0; i < job->nops; i++) {
		if (job->ops[i].src)
			drm_gem_object_put(&job->ops[i].src->base);
		if (job->ops[i].dst)
			drm_gem_object_put(&job->ops[i].dst->base);
	}
}

/* Everything a job holds besides its scheduler state; for built and for finished jobs. */
static void edu_job_free(struct edu_job *job)
{
	u32 i;

	edu_job_put_bos(job);
	for (i = 0; i < job->nin; i++)
		dma_fence_put(job->in_fences[i]);
	kfree(job->hw_fence_mem);	/* a job the scheduler killed never ran */
	kfree(job);
}

/**
 * edu_job_free_work - release finished jobs: their BOs (pins), fences, queue references
 * @work: &edu_accel_device.free_work
 */
void edu_job_free_work(struct work_struct *work)
{
	struct edu_accel_device *edev = container_of(work, struct edu_accel_device, free_work);
	struct llist_node *list = llist_reverse_order(llist_del_all(&edev->free_jobs));
	struct edu_job *job, *next;

	llist_for_each_entry_safe(job, next, list, free_node) {
		struct edu_queue *q = job->queue;

		edu_job_free(job);
		atomic_dec(&q->file->jobs);
		edu_queue_put(q);
		if (atomic_dec_and_test(&edev->jobs_alive))
			wake_up_all(&edev->jobs_freed);
		cond_resched();
	}
}

/*
 * The scheduler a freed job's fences name from then on: it outlives every device and the
 * module (allocated at load, never freed), so that only its name is ever read.
 */
struct edu_retired_timeline {
	struct drm_gpu_scheduler sched;
	char name[16];
};

static struct drm_gpu_scheduler *edu_retired_sched;

/**
 * edu_fences_init - allocate the timeline freed jobs' fences are moved to
 *
 * Called once at module load. The allocation is never freed: a sync_file, a syncobj or another
 * driver's reservation may hold one of our fences after rmmod, and 6.1's drm_sched reads the
 * fence's scheduler name whenever it is asked (SYNC_IOC_FILE_INFO, debugfs, tracepoints).
 * kmemleak is told so.
 *
 * Return: 0 or -ENOMEM.
 */
int edu_fences_init(void)
{
	struct edu_retired_timeline *t = kzalloc(sizeof(*t), GFP_KERNEL);

	if (!t)
		return -ENOMEM;
	strscpy(t->name, EDU_ACCEL_NAME "-done", sizeof(t->name));
	t->sched.name = t->name;
	kmemleak_not_leak(t);
	edu_retired_sched = &t->sched;
	return 0;
}

/*
 * A job's finished and scheduled fences outlive it: syncobjs, sync_files and other drivers'
 * reservations keep them. 6.1's drm_sched_fence reads its scheduler's name, which lives in
 * this device, and drops its parent, our hardware fence whose ops are module text, only when
 * the last reference goes: a sync_file queried after unbind and the last close, or released
 * after rmmod, reached freed memory (KASAN: use-after-free in
 * drm_sched_fence_get_timeline_name). When the job is freed both fences have signalled, so
 * neither needs its parent any more, and the scheduler is replaced by the retired timeline.
 */
static void edu_fence_detach(struct drm_sched_fence *s_fence)
{
	dma_fence_put(xchg(&s_fence->parent, NULL));
	WRITE_ONCE(s_fence->sched, edu_retired_sched);
}

static void edu_sched_free_job(struct drm_sched_job *sched_job)
{
	struct edu_job *job = to_edu_job(sched_job);
	struct edu_accel_device *edev = job->queue->edev;

	edu_fence_detach(sched_job->s_fence);
	drm_sched_job_cleanup(sched_job);
	if (!job->retired)	/* killed with its entity: it never reached the engine */
		edu_queue_job_retired(job->queue);
	/*
	 * The last reference to a BO unpins and unmaps it (a gigabyte, or waiting on another
	 * mm's notifier): not in the scheduler thread, which also runs run_job.
	 */
	if (llist_add(&job->free_node, &edev->free_jobs))
		queue_work(system_unbound_wq, &edev->free_work);
}

/*
 * Moves ownership of [off, off + len) of @bo (its DMA segments) to the CPU or the device.
 * Returns false when there was nothing to do: a mapping whose syncs are no-ops (coherent,
 * not bounced) is skipped without walking its segments.
 */
static bool edu_bo_sync_range(struct device *dev, struct edu_bo *bo, u64 off, u64 len,
			      bool for_cpu)
{
	struct scatterlist *sg;
	u64 base = 0;
	int i;

	if (!bo->mapped || !bo->need_sync)
		return false;
	for_each_sgtable_dma_sg(&bo->sgt, sg, i) {
		u64 seg = sg_dma_len(sg);

		if (off < base + seg && off + len > base) {
			u64 from = max(off, base) - base;
			u64 to = min(off + len, base + seg) - base;

			if (for_cpu)
				dma_sync_single_range_for_cpu(dev, sg_dma_address(sg), from,
							      to - from, bo->dir);
			else
				dma_sync_single_range_for_device(dev, sg_dma_address(sg), from,
								 to - from, bo->dir);
		}
		base += seg;
		if (base >= off + len)
			break;
	}
	return true;
}

/**
 * edu_job_needs_sync - whether handing the job's ranges over moves bytes (bounce buffers,
 * non-coherent DMA), which only process context may do
 * @job: the job
 *
 * Return: false when every sync of the job is a no-op.
 */
bool edu_job_needs_sync(const struct edu_job *job)
{
	u32 i;

	for (i = 0; i < job->nops; i++) {
		const struct edu_op *op = &job->ops[i];

		if ((op->src && op->src->need_sync) || (op->dst && op->dst->need_sync))
			return true;
	}
	return false;
}

/**
 * edu_job_sync_for_device - hand the job's ranges to the device (the job starts)
 * @edev: the device
 * @job: the job, at the head of the engine: every earlier job has ended and given its
 *	destinations back to the CPU, so what is copied into bounce buffers here is current
 */
void edu_job_sync_for_device(struct edu_accel_device *edev, struct edu_job *job)
{
	struct device *dev = &edev->pdev->dev;
	u32 i, ranges = 0;
	u64 bytes = 0;

	for (i = 0; i < job->nops; i++) {
		struct edu_op *op = &job->ops[i];

		if (op->src && edu_bo_sync_range(dev, op->src, op->src_off, op->size, false)) {
			ranges++;
			bytes += op->size;
		}
		if (op->dst && edu_bo_sync_range(dev, op->dst, op->dst_off, op->size, false)) {
			ranges++;
			bytes += op->size;
		}
	}
	trace_edu_job_sync(job->owner, job->queue->id, job->seqno, true, ranges, bytes);
}

/**
 * edu_job_sync_for_cpu - give the job's destination ranges back to the CPU (the job ended)
 * @edev: the device
 * @job: the job
 */
void edu_job_sync_for_cpu(struct edu_accel_device *edev, struct edu_job *job)
{
	struct device *dev = &edev->pdev->dev;
	u32 i, ranges = 0;
	u64 bytes = 0;

	for (i = 0; i < job->nops; i++) {
		struct edu_op *op = &job->ops[i];

		if (op->dst && edu_bo_sync_range(dev, op->dst, op->dst_off, op->size, true)) {
			ranges++;
			bytes += op->size;
		}
	}
	trace_edu_job_sync(job->owner, job->queue->id, job->seqno, false, ranges, bytes);
}

static const struct drm_sched_backend_ops edu_sched_ops = {
	.run_job = edu_sched_run_job,
	.timedout_job = edu_sched_timedout_job,
	.free_job = edu_sched_free_job,
};

/*
 * The last close after unbind (or the end of a failed probe): drm_sched_fini() stops the
 * scheduler thread, and on 6.1 leaks the jobs it has not freed yet, with their pins. Every
 * file is closed, so every job is on its way out: wait for the count to reach zero first.
 */
static void edu_sched_fini(struct drm_device *drm, void *unused)
{
	struct edu_accel_device *edev = to_edu(drm);

	edu_sched_drain(edev);
	drm_sched_fini(&edev->sched);
	flush_work(&edev->free_work);
}

/**
 * edu_sched_init - the device's scheduler, torn down with the DRM device
 * @edev: the device
 *
 * Return: 0 or a negative errno.
 */
int edu_sched_init(struct edu_accel_device *edev)
{
	long timeout = msecs_to_jiffies(job_timeout_ms ?: 1);
	int ret;

#ifdef EDU_HAVE_SCHED_INIT_ARGS
	const struct drm_sched_init_args args = {
		.ops = &edu_sched_ops,
		.credit_limit = EDU_SCHED_CREDITS,
		.timeout = timeout,
		.name = dev_name(&edev->pdev->dev),
		.dev = &edev->pdev->dev,
	};

	ret = drm_sched_init(&edev->sched, &args);
#else
	ret = drm_sched_init(&edev->sched, &edu_sched_ops, EDU_SCHED_CREDITS, 0, timeout, NULL,
			     NULL, dev_name(&edev->pdev->dev), &edev->pdev->dev);
#endif
	if (ret)
		return ret;
	atomic_set(&edev->jobs_alive, 0);
	init_waitqueue_head(&edev->jobs_freed);
	init_llist_head(&edev->free_jobs);
	INIT_WORK(&edev->free_work, edu_job_free_work);
	return drmm_add_action_or_reset(&edev->drm, edu_sched_fini, NULL);
}

/**
 * edu_sched_drain - wait until every job handed to the scheduler is released
 * @edev: the device
 *
 * After unplug every job ends at once (-ENODEV) and the scheduler frees it on its own time,
 * the free worker then drops its BOs' pins; drm_sched_fini() would not, so removal and the
 * last close wait for it. Only a job waiting for another driver's fence that never signals
 * can outlast the wait (it is reported).
 */
void edu_sched_drain(struct edu_accel_device *edev)
{
	if (!wait_event_timeout(edev->jobs_freed, !atomic_read(&edev->jobs_alive), 30 * HZ))
		drm_err(&edev->drm, "%d jobs still held after 30 s\n",
			atomic_read(&edev->jobs_alive));
}

/**
 * edu_file_open - per-file state
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
	file->driver_priv = NULL;
	edu_file_put(ef);
}

/*
 * The page of completion slots, created (with a handle) by the file's first queue; with
 * @want_handle, a handle is made again if userspace closed the one it had.
 */
static int edu_file_completion(struct edu_accel_device *edev, struct drm_file *file,
			       bool want_handle)
{
	struct edu_file *ef = file->driver_priv;
	struct edu_bo *bo;
	int ret;

	lockdep_assert_held(&ef->lock);
	if (ef->completion && (ef->completion_handle || !want_handle))
		return 0;
	if (ef->completion)	/* userspace closed its handle: a fresh one for the same page */
		return drm_gem_handle_create(file, &ef->completion->base, &ef->completion_handle);
	BUILD_BUG_ON(EDU_MAX_QUEUES * sizeof(struct drm_edu_accel_completion) >
		     DRM_EDU_ACCEL_FILE_STATUS_OFFSET);
	BUILD_BUG_ON(DRM_EDU_ACCEL_FILE_STATUS_OFFSET + sizeof(struct drm_edu_accel_file_status) >
		     PAGE_SIZE);
	bo = edu_bo_create(edev, ef->client, PAGE_SIZE, true);
	if (IS_ERR(bo))
		return PTR_ERR(bo);
	ret = drm_gem_handle_create(file, &bo->base, &ef->completion_handle);
	if (ret) {
		drm_gem_object_put(&bo->base);
		return ret;
	}
	ef->completion = bo;	/* the file's own reference, beside the handle's */
	return 0;
}

/**
 * edu_file_status_page - the file's completion page, created if needed
 * @file: the file
 * @handle: out, its GEM handle in the file (may be NULL)
 *
 * Return: the page with a new reference, or an ERR_PTR.
 */
struct edu_bo *edu_file_status_page(struct drm_file *file, u32 *handle)
{
	struct edu_file *ef = file->driver_priv;
	struct edu_bo *bo;
	int ret;

	mutex_lock(&ef->lock);
	ret = edu_file_completion(to_edu(file->minor->dev), file, handle != NULL);
	bo = ret ? ERR_PTR(ret) : ef->completion;
	if (!ret) {
		drm_gem_object_get(&bo->base);
		if (handle)
			*handle = ef->completion_handle;
	}
	mutex_unlock(&ef->lock);
	return bo;
}

/**
 * edu_file_handle_closed - a GEM handle of @file to @bo was closed (GEM_CLOSE, file close)
 * @file: the file
 * @bo: the BO the handle named
 *
 * The completion page has one handle per file; once it is closed its number is free for the
 * next BO, so it must not be reported again (GET_PARAM, QUEUE_CREATE).
 */
void edu_file_handle_closed(struct drm_file *file, struct edu_bo *bo)
{
	struct edu_file *ef = file->driver_priv;

	mutex_lock(&ef->lock);
	if (ef->completion == bo)
		ef->completion_handle = 0;
	mutex_unlock(&ef->lock);
}

/* The scheduler run queue of a uapi priority, or -EINVAL / -EACCES. */
static int edu_queue_priority(u32 priority, enum drm_sched_priority *prio)
{
	switch (priority) {
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
	struct edu_queue *q;
	u32 id;
	int ret;

	if (args->flags || args->pad || args->reserved[0] || args->reserved[1])
		return -EINVAL;
	ret = edu_queue_priority(args->priority, &prio);
	if (ret)
		return ret;
	q = kzalloc(sizeof(*q), GFP_KERNEL_ACCOUNT);
	if (!q)
		return -ENOMEM;
	kref_init(&q->ref);
	q->edev = edev;
	q->file = ef;
	q->priority = args->priority;
	mutex_init(&q->submit_lock);
	ret = drm_sched_entity_init(&q->entity, prio, &sched, 1, NULL);
	if (ret)
		goto free;

	mutex_lock(&ef->lock);
	ret = edu_file_completion(edev, file, true);
	if (ret)
		goto unlock;
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
	args->completion_handle = ef->completion_handle;
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

/* Byte range [off, off + size) lies inside a span of @limit bytes. */
static bool edu_range_ok(u64 off, u64 size, u64 limit)
{
	return size && off <= limit && size <= limit - off;
}

static int edu_op_bo(struct drm_file *file, u32 handle, u64 off, u64 size, bool write,
		     struct edu_bo **bo_out, u64 *sg_off)
{
	struct edu_bo *bo = edu_bo_lookup(file, handle);

	if (!bo)
		return -ENOENT;
	*bo_out = bo;	/* the job's reference, dropped with the job */
	if (!edu_range_ok(off, size, bo->size))
		return -EINVAL;
	if (write && (bo->flags & DRM_EDU_ACCEL_BO_INFO_READONLY))
		return -EACCES;
	if (bo->readonly_map)
		return -EACCES;	/* the completion page is the driver's alone */
	if (edu_bo_invalidated(bo))
		return -ESTALE;	/* the range no longer holds these pages */
	*sg_off = bo->offset + off;
	return 0;
}

/* Where an op's byte @sg_off of @bo is in its process (userptr BOs), or U64_MAX. */
static u64 edu_op_user_addr(const struct edu_bo *bo, u64 sg_off)
{
	if (!(bo->flags & DRM_EDU_ACCEL_BO_INFO_USERPTR))
		return U64_MAX;
	return bo->user_ptr + (sg_off - bo->offset);
}

/*
 * H2H stages through the device buffer chunk by chunk, front to back: a destination that
 * starts inside the source, after its start, overwrites source bytes before they are loaded.
 * Refused when the two ranges are one BO's, or one process's registered memory (two userptr
 * BOs of the same pages); a copy to a lower address, or onto itself, comes out right.
 */
static bool edu_h2h_clobbers_source(const struct edu_op *op)
{
	u64 src = op->src_off, dst = op->dst_off;

	if (op->src != op->dst) {
		if (!op->src->mm || op->src->mm != op->dst->mm)
			return false;
		src = edu_op_user_addr(op->src, op->src_off);
		dst = edu_op_user_addr(op->dst, op->dst_off);
		if (src == U64_MAX || dst == U64_MAX)
			return false;
	}
	return dst > src && dst - src < op->size;
}

static int edu_op_prepare(struct drm_file *file, const struct drm_edu_accel_copy_op *u,
			  struct edu_op *op)
{
	int ret;

	if (u->flags)
		return -EINVAL;
	op->type = u->type;
	op->size = u->size;
	switch (u->type) {
	case DRM_EDU_ACCEL_OP_H2D:
		if (u->dst_handle || !edu_range_ok(u->dst_offset, u->size, EDU_MAX_XFER))
			return -EINVAL;
		op->dst_off = u->dst_offset;
		return edu_op_bo(file, u->src_handle, u->src_offset, u->size, false, &op->src,
				 &op->src_off);
	case DRM_EDU_ACCEL_OP_D2H:
		if (u->src_handle || !edu_range_ok(u->src_offset, u->size, EDU_MAX_XFER))
			return -EINVAL;
		op->src_off = u->src_offset;
		return edu_op_bo(file, u->dst_handle, u->dst_offset, u->size, true, &op->dst,
				 &op->dst_off);
	case DRM_EDU_ACCEL_OP_H2H:
		ret = edu_op_bo(file, u->src_handle, u->src_offset, u->size, false, &op->src,
				&op->src_off);
		if (ret)
			return ret;
		ret = edu_op_bo(file, u->dst_handle, u->dst_offset, u->size, true, &op->dst,
				&op->dst_off);
		if (ret)
			return ret;
		return edu_h2h_clobbers_source(op) ? -EINVAL : 0;
	default:
		return -EINVAL;
	}
}

/* Elements of a user array are at most a page apart; smaller ones than 2.0's are refused. */
static int edu_array_check(const struct drm_edu_accel_obj_array *a, u32 min_stride,
			   u32 max_count)
{
	if (a->count > max_count)
		return -EINVAL;
	if (a->count && (a->stride < min_stride || a->stride > PAGE_SIZE))
		return -EINVAL;
	return 0;
}

/*
 * Element @i of a user array of the caller's stride: a larger element's unknown tail must be
 * zero (-E2BIG), a smaller one's missing fields read as zero.
 */
static int edu_array_get(const struct drm_edu_accel_obj_array *a, u32 i, void *dst, size_t size)
{
	const void __user *src = u64_to_user_ptr(a->array + (u64)i * a->stride);

	return copy_struct_from_user(dst, size, src, a->stride);
}

/**
 * edu_max_job_bytes - device traffic one job may carry (module parameter max_job_mib)
 *
 * Return: bytes, H2H counted twice.
 */
u64 edu_max_job_bytes(void)
{
	return (u64)max_job_mib << 20;
}

static struct edu_job *edu_job_build(struct drm_file *file, const struct drm_edu_accel_submit *args)
{
	struct drm_edu_accel_copy_op u;
	struct edu_job *job;
	u32 i;
	int ret;

	u64 traffic = 0;

	job = kzalloc(struct_size(job, ops, args->ops.count), GFP_KERNEL_ACCOUNT);
	if (!job)
		return ERR_PTR(-ENOMEM);
	job->hw_fence_mem = kzalloc(sizeof(*job->hw_fence_mem), GFP_KERNEL_ACCOUNT);
	if (!job->hw_fence_mem) {
		ret = -ENOMEM;
		goto put;
	}
	for (i = 0; i < args->ops.count; i++) {
		ret = edu_array_get(&args->ops, i, &u, sizeof(u));
		if (ret)
			goto put;
		job->nops = i + 1;	/* so that put_bos sees this op's BOs, even half set */
		ret = edu_op_prepare(file, &u, &job->ops[i]);
		if (ret)
			goto put;
		/* Each op is at most EDU_MAX_BO_SIZE: no overflow over EDU_MAX_OPS of them. */
		traffic += u.type == DRM_EDU_ACCEL_OP_H2H ? 2 * u.size : u.size;
	}
	if (traffic > edu_max_job_bytes()) {
		ret = -E2BIG;
		goto put;
	}
	return job;

put:
	edu_job_free(job);
	return ERR_PTR(ret);
}

static noinline int edu_job_add_in_syncs(struct drm_file *file, struct edu_job *job,
					 const struct drm_edu_accel_submit *args)
{
	struct drm_edu_accel_sync s;
	struct dma_fence *fence;
	u32 i;
	int ret;

	for (i = 0; i < args->in_syncs.count; i++) {
		ret = edu_array_get(&args->in_syncs, i, &s, sizeof(s));
		if (ret)
			return ret;
		if (s.pad)
			return -EINVAL;
		ret = drm_syncobj_find_fence(file, s.handle, s.point, 0, &fence);
		if (ret)
			return ret;
		/* Kept to see, when the job runs, whether the input failed. */
		job->in_fences[job->nin++] = dma_fence_get(fence);
		/* Consumes the fence reference, on error too. */
		ret = drm_sched_job_add_dependency(&job->base, fence);
		if (ret)
			return ret;
	}
	return 0;
}
ALLOW_ERROR_INJECTION(edu_job_add_in_syncs, ERRNO);

/**
 * struct edu_out_sync - an out-syncobj resolved before the job is pushed
 * @syncobj: the syncobj (referenced)
 * @chain: preallocated timeline node, NULL for a binary syncobj
 * @point: timeline point
 */
struct edu_out_sync {
	struct drm_syncobj *syncobj;
	struct dma_fence_chain *chain;
	u64 point;
};

static void edu_out_syncs_free(struct edu_out_sync *outs, u32 n)
{
	u32 i;

	for (i = 0; outs && i < n; i++) {
		if (outs[i].syncobj)
			drm_syncobj_put(outs[i].syncobj);
		dma_fence_chain_free(outs[i].chain);
	}
	kvfree(outs);
}

/* Resolves every out-sync up front, so nothing can fail once the job is pushed. */
static struct edu_out_sync *edu_out_syncs_get(struct drm_file *file,
					      const struct drm_edu_accel_submit *args)
{
	struct edu_out_sync *outs;
	struct drm_edu_accel_sync s;
	int ret = 0;
	u32 i;

	outs = kvcalloc(args->out_syncs.count, sizeof(*outs), GFP_KERNEL_ACCOUNT);
	if (!outs)
		return ERR_PTR(-ENOMEM);
	for (i = 0; i < args->out_syncs.count; i++) {
		ret = edu_array_get(&args->out_syncs, i, &s, sizeof(s));
		if (ret)
			break;
		if (s.pad) {
			ret = -EINVAL;
			break;
		}
		outs[i].syncobj = drm_syncobj_find(file, s.handle);
		if (!outs[i].syncobj) {
			ret = -ENOENT;
			break;
		}
		outs[i].point = s.point;
		if (s.point) {
			outs[i].chain = dma_fence_chain_alloc();
			if (!outs[i].chain) {
				ret = -ENOMEM;
				break;
			}
		}
	}
	if (ret) {
		edu_out_syncs_free(outs, args->out_syncs.count);
		return ERR_PTR(ret);
	}
	return outs;
}

static void edu_out_syncs_signal(struct edu_out_sync *outs, u32 n, struct dma_fence *done)
{
	u32 i;

	for (i = 0; i < n; i++) {
		if (outs[i].chain) {
			drm_syncobj_add_point(outs[i].syncobj, outs[i].chain, done, outs[i].point);
			outs[i].chain = NULL;	/* now owned by the syncobj */
		} else {
			drm_syncobj_replace_fence(outs[i].syncobj, done);
		}
	}
}

/* Widens the window in which a queued job may end and be freed (debugfs fault injection). */
/*
 * Fault injection: SUBMIT sleeps after queueing its job. It runs inside drm_dev_enter(),
 * which drm_dev_unplug() waits for: the sleep ends as soon as the device is unplugged.
 */
static void edu_submit_fault_delay(struct edu_accel_device *edev)
{
	u32 ms = READ_ONCE(edev->submit_delay_ms);
	unsigned long end;

	if (likely(!ms))
		return;
	end = jiffies + msecs_to_jiffies(min(ms, 10000U));
	while (time_before(jiffies, end) && !drm_dev_is_unplugged(&edev->drm))
		msleep(20);
}

int edu_ioctl_submit(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_submit *args = data;
	struct edu_file *ef = file->driver_priv;
	struct edu_out_sync *outs = NULL;
	struct edu_resv_set resv;
	struct dma_fence *done;
	struct edu_queue *q;
	struct edu_job *job;
	u64 seqno;
	int ret;

	BUILD_BUG_ON(sizeof(struct drm_edu_accel_copy_op) < EDU_COPY_OP_MIN_STRIDE ||
		     sizeof(struct drm_edu_accel_sync) < EDU_SYNC_MIN_STRIDE);
	if (args->flags || !args->ops.count)
		return -EINVAL;
	ret = edu_array_check(&args->ops, EDU_COPY_OP_MIN_STRIDE, EDU_MAX_OPS);
	if (!ret)
		ret = edu_array_check(&args->in_syncs, EDU_SYNC_MIN_STRIDE, EDU_MAX_SYNCS);
	if (!ret)
		ret = edu_array_check(&args->out_syncs, EDU_SYNC_MIN_STRIDE, EDU_MAX_SYNCS);
	if (ret)
		return ret;

	xa_lock(&ef->queues);
	q = xa_load(&ef->queues, args->queue);
	/* A destroyed queue keeps its id until its last job is freed; it is gone for users. */
	if (q && (READ_ONCE(q->dead) || !kref_get_unless_zero(&q->ref)))
		q = NULL;
	xa_unlock(&ef->queues);
	if (!q)
		return -ENOENT;
	if (atomic_inc_return(&ef->jobs) > max_jobs_per_file) {
		atomic_dec(&ef->jobs);
		ret = -EBUSY;
		goto put_queue;
	}

	job = edu_job_build(file, args);
	if (IS_ERR(job)) {
		ret = PTR_ERR(job);
		goto uncount;
	}
	job->queue = q;	/* the job's queue reference from here on */
	job->owner = ef->client->id;
	ret = drm_sched_job_init(&job->base, &q->entity, ef->client);
	if (ret)
		goto free_job;
	ret = edu_job_add_in_syncs(file, job, args);
	if (ret)
		goto cleanup_job;
	outs = edu_out_syncs_get(file, args);
	if (IS_ERR(outs)) {
		ret = PTR_ERR(outs);
		goto cleanup_job;
	}
	ret = edu_job_lock_shared(to_edu(drm), job, &resv);
	if (ret)
		goto free_outs;

	mutex_lock(&q->submit_lock);
	if (q->dead) {
		mutex_unlock(&q->submit_lock);
		edu_resv_unlock(&resv);
		ret = -ENOENT;
		goto free_outs;
	}
	drm_sched_job_arm(&job->base);
	atomic_inc(&q->pending);	/* nothing fails from here on */
	seqno = ++q->next_seqno;
	job->seqno = seqno;
	done = dma_fence_get(&job->base.s_fence->finished);
	trace_edu_job_queued(job->owner, q->id, seqno, job->nops, job->nin, done->context,
			     done->seqno);
	edu_resv_publish(&resv, done);
	edu_resv_unlock(&resv);
	atomic_inc(&to_edu(drm)->jobs_alive);
	/* The job may run, end and be freed before push returns: not a word of it after. */
	drm_sched_entity_push_job(&job->base);
	edu_submit_fault_delay(to_edu(drm));
	args->seqno = seqno;
	mutex_unlock(&q->submit_lock);

	edu_out_syncs_signal(outs, args->out_syncs.count, done);
	edu_out_syncs_free(outs, args->out_syncs.count);
	dma_fence_put(done);
	return 0;

free_outs:
	edu_out_syncs_free(outs, args->out_syncs.count);
cleanup_job:
	drm_sched_job_cleanup(&job->base);
free_job:
	edu_job_free(job);
uncount:
	atomic_dec(&ef->jobs);
put_queue:
	edu_queue_put(q);
	return ret;
}
