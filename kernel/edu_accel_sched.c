// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel's scheduler backend: drm_sched's run_job, timedout_job and free_job, the
 * ownership syncs of a job's ranges, and the release of finished jobs.
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

static unsigned int job_timeout_ms = 5000;
module_param(job_timeout_ms, uint, 0444);
MODULE_PARM_DESC(job_timeout_ms,
		 "A running job that moves no byte for this long is failed with -ETIMEDOUT (default 5000)");

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
	 * ranges to the device when the job reaches its head (the engine's edu_job_to_device()).
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

/**
 * edu_job_free - release everything a job holds besides its scheduler state
 * @job: a job SUBMIT built and never pushed, or a finished one
 */
void edu_job_free(struct edu_job *job)
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

