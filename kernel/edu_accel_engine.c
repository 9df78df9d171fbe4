// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel engine: runs jobs through edu's single DMA channel.
 *
 * The scheduler hands jobs over in order (run_job); the engine cuts each copy into edu
 * transfers of 1..EDU_MAX_XFER bytes, as few as the DMA segments allow, and programs the
 * next transfer from the hard interrupt handler, so the channel never waits for a thread
 * while a job has bytes left. That chaining is all the hard interrupt handler does (and
 * starting the next job when handing it to the device moves no bytes). The rest runs in the
 * interrupt's thread, with interrupts on: a job whose last transfer ended gets its ranges
 * back for the CPU (under bouncing, a memcpy of up to the whole job), its queue's completion
 * slot written (read by userspace without a syscall), then its hardware fence signalled, with
 * every callback behind it; a job whose start moves bytes into bounce buffers is started.
 *
 * The device buffer belongs to the client whose job last used it: before a job of another
 * client moves a byte, the engine clears the buffer with one transfer from a zeroed page, so
 * no file can read (or build on) bytes another file left there.
 */
#include <drm/drm_drv.h>
#include <drm/drm_managed.h>
#include <drm/drm_print.h>
#include <linux/dma-fence.h>
#include <linux/dma-fence-chain.h>
#include <linux/dma-fence-unwrap.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/iopoll.h>
#include <linux/ktime.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>

#include <uapi/drm/edu_accel.h>

#include "edu_accel_drv.h"
#include "edu_accel_engine.h"
#include "edu_accel_gem.h"
#include "edu_accel_hw.h"
#include "edu_accel_job.h"
#include "edu_accel_trace.h"

static const char *edu_fence_driver_name(struct dma_fence *fence)
{
	return EDU_ACCEL_NAME;
}

static const char *edu_fence_timeline_name(struct dma_fence *fence)
{
	return "edu-dma";
}

static const struct dma_fence_ops edu_fence_ops = {
	.get_driver_name = edu_fence_driver_name,
	.get_timeline_name = edu_fence_timeline_name,
};

/*
 * The longest run of DMA-contiguous bytes at scatter-gather offset @off, at most @max.
 * Lookups within one copy only move forward, so the cursor makes a whole copy O(segments).
 */
static u32 edu_sg_span(struct edu_sg_cursor *cur, struct edu_bo *bo, u64 off, u32 max,
		       dma_addr_t *addr)
{
	u64 len;

	if (!cur->sg || off < cur->base) {
		cur->sg = bo->sgt.sgl;
		cur->base = 0;
	}
	while (off >= cur->base + sg_dma_len(cur->sg)) {
		cur->base += sg_dma_len(cur->sg);
		cur->sg = sg_next(cur->sg);
	}
	*addr = sg_dma_address(cur->sg) + (off - cur->base);
	len = cur->base + sg_dma_len(cur->sg) - off;
	return min_t(u64, len, max);
}

static void edu_job_next_op(struct edu_job *job)
{
	job->cur_op++;
	job->done = 0;
	job->storing = false;
	job->chunk = 0;
	job->chunk_pos = 0;
	job->src_cur.sg = NULL;
	job->dst_cur.sg = NULL;
}

/* Fills @x with the job's next transfer; false when every byte has been issued. */
static bool edu_job_next_xfer(struct edu_job *job, struct edu_xfer *x)
{
	while (job->cur_op < job->nops) {
		struct edu_op *op = &job->ops[job->cur_op];
		u64 left = op->size - job->done;

		switch (op->type) {
		case DRM_EDU_ACCEL_OP_H2D:
		case DRM_EDU_ACCEL_OP_D2H:
			if (!left)
				break;
			x->to_ram = op->type == DRM_EDU_ACCEL_OP_D2H;
			if (x->to_ram) {
				x->len = edu_sg_span(&job->dst_cur, op->dst, op->dst_off + job->done,
						     left, &x->ram);
				x->dev_off = op->src_off + job->done;
			} else {
				x->len = edu_sg_span(&job->src_cur, op->src, op->src_off + job->done,
						     left, &x->ram);
				x->dev_off = op->dst_off + job->done;
			}
			job->done += x->len;
			return true;
		case DRM_EDU_ACCEL_OP_H2H:
			/* Staged through the device buffer: load a chunk, then store it. */
			if (!job->chunk) {
				if (!left)
					break;
				job->chunk = min_t(u64, left, EDU_MAX_XFER);
			}
			if (!job->storing && job->chunk_pos == job->chunk) {
				job->storing = true;
				job->chunk_pos = 0;
			}
			if (job->chunk_pos < job->chunk) {
				u64 at = job->done + job->chunk_pos;
				u32 want = job->chunk - job->chunk_pos;

				x->to_ram = job->storing;
				x->len = job->storing ?
					 edu_sg_span(&job->dst_cur, op->dst, op->dst_off + at, want, &x->ram) :
					 edu_sg_span(&job->src_cur, op->src, op->src_off + at, want, &x->ram);
				x->dev_off = job->chunk_pos;
				job->chunk_pos += x->len;
				return true;
			}
			job->done += job->chunk;
			job->chunk = 0;
			job->chunk_pos = 0;
			job->storing = false;
			continue;
		}
		edu_job_next_op(job);
	}
	return false;
}

/* Whether handing the job's ranges over moves bytes (bounce buffers, non-coherent DMA). */
static bool edu_job_needs_sync(const struct edu_job *job)
{
	u32 i;

	for (i = 0; i < job->nops; i++) {
		const struct edu_op *op = &job->ops[i];

		if ((op->src && edu_bo_needs_sync(op->src)) || (op->dst && edu_bo_needs_sync(op->dst)))
			return true;
	}
	return false;
}

/*
 * Hands the job's ranges to the device (the job starts at the head of the engine: every
 * earlier job has ended and given its destinations back to the CPU, so what is copied into
 * bounce buffers here is current), or its destinations back to the CPU (the job ended).
 */
static void edu_job_sync(struct edu_accel_device *edev, struct edu_job *job, bool for_cpu)
{
	u32 i, ranges = 0;
	u64 bytes = 0;

	for (i = 0; i < job->nops; i++) {
		struct edu_op *op = &job->ops[i];

		if (!for_cpu && op->src && edu_bo_sync(edev, op->src, op->src_off, op->size, false)) {
			ranges++;
			bytes += op->size;
		}
		if (op->dst && edu_bo_sync(edev, op->dst, op->dst_off, op->size, for_cpu)) {
			ranges++;
			bytes += op->size;
		}
	}
	trace_edu_job_sync(job->owner, job->queue->id, job->seqno, !for_cpu, ranges, bytes);
}

/*
 * Tells the world the job ended, with job->error: its ranges are back with the CPU. Called
 * with the engine lock held; the job is on no list.
 */
static void edu_job_signal_locked(struct edu_accel_device *edev, struct edu_job *job)
{
	struct edu_engine *e = &edev->engine;
	struct drm_edu_accel_completion *slot = job->queue->slot;
	struct dma_fence *fence = job->hw_fence;
	int error = job->error;

	lockdep_assert_held(&e->lock);
	if (error) {
		WRITE_ONCE(slot->failed, job->seqno);
		WRITE_ONCE(slot->error, error);
		dma_fence_set_error(fence, error);
		/*
		 * 6.1's scheduler does not pass the hardware fence's error on to the finished
		 * fence, which is what syncobjs and sync_files carry: set it there too.
		 */
		dma_fence_set_error(&job->base.s_fence->finished, error);
		e->jobs_failed++;
	} else {
		e->jobs_done++;
	}
	/* Readers that see "completed" must also see the failure it may carry. */
	smp_wmb();
	WRITE_ONCE(slot->completed, job->seqno);
	trace_edu_job_done(job->owner, job->queue->id, job->seqno, fence->context, fence->seqno,
			   error);
	job->retired = true;
	edu_queue_job_retired(job->queue);
	/* The job may be freed once its fence signals: drop our pointer first. */
	job->hw_fence = NULL;
	dma_fence_signal_locked(fence);
	dma_fence_put(fence);
}

/*
 * The job leaves the engine (its last transfer ended, or it failed): it waits on the done
 * list, and the time since its start at the head is its client's engine time (fdinfo).
 */
static void edu_job_ended_locked(struct edu_engine *e, struct edu_job *job)
{
	lockdep_assert_held(&e->lock);
	if (job->started)
		atomic64_add(ktime_to_ns(ktime_sub(ktime_get(), job->start_time)),
			     &job->queue->file->client->engine_ns);
	list_move_tail(&job->engine_link, &e->done);
}

/* Nothing is on the engine or waiting to be completed (teardown waits for it unlocked). */
static bool edu_engine_empty(struct edu_engine *e)
{
	return list_empty(&e->jobs) && list_empty(&e->done);
}

/*
 * Completes the jobs that ended, in order. The device is done with their buffers: they are
 * handed back before anyone hears of it, with interrupts on. Only what was handed over:
 * under bouncing, syncing an unsynced range for the CPU would copy a stale bounce slot over
 * the user's bytes.
 */
static void edu_engine_retire(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	struct edu_job *job;

	lockdep_assert_held(&e->advance_lock);
	for (;;) {
		spin_lock_irq(&e->lock);
		job = list_first_entry_or_null(&e->done, struct edu_job, engine_link);
		if (job)
			list_del_init(&job->engine_link);
		spin_unlock_irq(&e->lock);
		if (!job)
			return;
		if (job->synced)
			edu_job_sync(edev, job, true);
		spin_lock_irq(&e->lock);
		edu_job_signal_locked(edev, job);
		if (edu_engine_empty(e))
			wake_up_all(&e->idle);
		spin_unlock_irq(&e->lock);
	}
}

static void edu_engine_set_busy(struct edu_engine *e, bool busy)
{
	ktime_t now = ktime_get();

	if (busy && !e->busy)
		e->busy_since = now;
	else if (!busy && e->busy)
		e->busy_ns += ktime_to_ns(ktime_sub(now, e->busy_since));
	e->busy = busy;
}

/*
 * Whether an in-sync failed: a timeline point's own fence, or what it unwraps to. Called
 * when the job reaches the head of the engine, where every earlier job has ended; read
 * without the fences' locks (an error is set before the signalled bit).
 */
static bool edu_fence_failed(struct dma_fence *fence)
{
	struct dma_fence_unwrap iter;
	struct dma_fence *f;
	bool failed = false;

	/* No early exit: the iterator holds a reference it only drops at the end. */
	dma_fence_unwrap_for_each(f, &iter, dma_fence_chain_contained(fence)) {
		if (test_bit(DMA_FENCE_FLAG_SIGNALED_BIT, &f->flags) && READ_ONCE(f->error) < 0)
			failed = true;
	}
	return failed;
}

/*
 * First look at a job at the head: one whose input failed would copy bytes nobody made.
 * Every earlier job has ended here (and, for a job with in-fences, signalled its fence), so
 * this is where the job's ranges pass to the device:
 * a sync at run_job, with earlier jobs still on the engine, would copy stale CPU bytes over
 * what a producer already wrote into a shared bounce buffer.
 */
static void edu_job_start(struct edu_accel_device *edev, struct edu_job *job)
{
	u32 i;

	job->started = true;
	job->start_time = ktime_get();
	for (i = 0; i < job->nin && !job->error; i++)
		if (edu_fence_failed(job->in_fences[i]))
			job->error = -ECANCELED;
	if ((edev->engine.lost || drm_dev_is_unplugged(&edev->drm)) && !job->error)
		job->error = -ENODEV;
	trace_edu_job_start(job->owner, job->queue->id, job->seqno, job->hw_fence->context,
			    job->hw_fence->seqno, job->error);
	if (!job->error) {
		edu_job_sync(edev, job, false);
		job->synced = true;
	}
}

/* Clears the device buffer (all of it a transfer can reach) for a job of client @owner. */
static void edu_engine_scrub(struct edu_accel_device *edev, u64 owner)
{
	struct edu_engine *e = &edev->engine;
	struct edu_xfer x = {
		.ram = e->zero_dma,
		.dev_off = 0,
		.len = EDU_MAX_XFER,
		.to_ram = false,
	};

	trace_edu_scrub(e->owner, owner);
	edu_engine_set_busy(e, true);
	e->inflight = x.len;
	e->scrubbing = true;
	e->scrub_for = owner;
	edu_hw_start_xfer(edev, &x);
}

/*
 * Starts the next transfer of the first runnable job; jobs with nothing left go to the done
 * list. Any context. Left at the head for edu_engine_advance(), which completes the done
 * jobs first and starts it with the lock dropped: a job whose start moves bytes
 * (edu_job_needs_sync()), and one with in-fences, whose errors show only once the jobs
 * before it are completed (a dependency on a job of this scheduler is handed over as soon as
 * that job is, so its fence may belong to a job still on the done list).
 */
static void edu_engine_kick_locked(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	struct edu_job *job;
	struct edu_xfer x;

	lockdep_assert_held(&e->lock);
	if (e->busy || e->reserved || e->starting)
		return;
	while ((job = list_first_entry_or_null(&e->jobs, struct edu_job, engine_link))) {
		if (!job->started) {
			if (job->nin || (!job->error && edu_job_needs_sync(job)))
				return;
			edu_job_start(edev, job);
		}
		if ((e->lost || drm_dev_is_unplugged(&edev->drm)) && !job->error)
			job->error = -ENODEV;
		if (!job->error && job->owner != e->owner) {
			edu_engine_scrub(edev, job->owner);
			return;
		}
		if (!job->error && edu_job_next_xfer(job, &x)) {
			edu_engine_set_busy(e, true);
			e->inflight = x.len;
			trace_edu_xfer_start(job->owner, job->queue->id, job->seqno, x.ram,
					     x.dev_off, x.len, x.to_ram);
			edu_hw_start_xfer(edev, &x);
			return;
		}
		edu_job_ended_locked(e, job);
	}
	if (edu_engine_empty(e))
		wake_up_all(&e->idle);
}

/*
 * Everything the hard interrupt handler leaves to a thread: completes the jobs that ended,
 * in order, and starts the job at the head when that moves bytes, with the lock dropped
 * (@starting keeps everyone else off the engine meanwhile).
 */
static void edu_engine_advance_locked(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	struct edu_job *job;
	bool more;

	lockdep_assert_held(&e->advance_lock);
	do {
		edu_engine_retire(edev);
		spin_lock_irq(&e->lock);
		job = list_first_entry_or_null(&e->jobs, struct edu_job, engine_link);
		if (job && !job->started && !e->busy && !e->reserved) {
			e->starting = true;
			spin_unlock_irq(&e->lock);
			edu_job_start(edev, job);
			spin_lock_irq(&e->lock);
			e->starting = false;
		}
		edu_engine_kick_locked(edev);
		more = !list_empty(&e->done);
		spin_unlock_irq(&e->lock);
	} while (more);
}

static void edu_engine_advance(struct edu_accel_device *edev)
{
	mutex_lock(&edev->engine.advance_lock);
	edu_engine_advance_locked(edev);
	mutex_unlock(&edev->engine.advance_lock);
}

/* Whether the hard interrupt handler left work for the thread (lock held). */
static bool edu_engine_needs_thread(struct edu_engine *e)
{
	return !list_empty(&e->done) ||
	       (!e->busy && !e->reserved && !e->starting && !list_empty(&e->jobs));
}

/**
 * edu_engine_push - hand a job to the engine (the scheduler's run_job)
 * @edev: the device
 * @job: the job; job->error set means "complete it, in order, with that error"
 *
 * Return: the hardware fence, with a reference for the caller.
 */
struct dma_fence *edu_engine_push(struct edu_accel_device *edev, struct edu_job *job)
{
	struct edu_engine *e = &edev->engine;
	struct dma_fence *fence = job->hw_fence_mem;
	unsigned long flags;
	bool advance;

	/* Allocated at SUBMIT: the fence-signalling path must not allocate. */
	job->hw_fence_mem = NULL;
	spin_lock_irqsave(&e->lock, flags);
	dma_fence_init(fence, &edu_fence_ops, &e->lock, e->fence_ctx, ++e->fence_seqno);
	job->hw_fence = dma_fence_get(fence);
	trace_edu_job_run(job->owner, job->queue->id, job->seqno, fence->context, fence->seqno,
			  job->error);
	job->progress = e->xfers + e->scrubs;
	list_add_tail(&job->engine_link, &e->jobs);
	edu_engine_kick_locked(edev);
	advance = edu_engine_needs_thread(e);
	spin_unlock_irqrestore(&e->lock, flags);
	/* run_job may sleep: start (or complete) here what the engine could not. */
	if (advance)
		edu_engine_advance(edev);
	return fence;
}

/*
 * A DMA transfer ended: program the next one, or hand the job to the thread. True when
 * edu_engine_irq_thread() has work. Hard interrupt context.
 */
static bool edu_engine_dma_ended(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	struct edu_job *job;
	struct edu_xfer x;
	bool wake;

	spin_lock(&e->lock);
	if (!e->busy)
		goto out;	/* late interrupt of a transfer already given up */
	/*
	 * edu has no transfer tag: a late interrupt of a transfer given up by the timeout
	 * handler can arrive while the next transfer runs. The one in flight has ended only
	 * once the device cleared its start bit.
	 */
	if (!edu_hw_dma_idle(edev))
		goto out;
	if (atomic_dec_if_positive(&e->drop_irqs) >= 0)
		goto out;	/* fault injection: behave as if it never came */
	if (e->kxfer) {
		e->kxfer = false;
		e->xfers++;
		e->bytes += e->inflight;
		edu_engine_set_busy(e, false);
		complete(&e->kxfer_done);
		/* Jobs queued while it ran wait for edu_engine_unreserve(), unless it gave up. */
		edu_engine_kick_locked(edev);
		goto out;
	}
	if (e->scrubbing) {
		e->scrubbing = false;
		e->owner = e->scrub_for;
		e->scrubs++;
		edu_engine_set_busy(e, false);
		edu_engine_kick_locked(edev);
		goto out;
	}
	job = list_first_entry(&e->jobs, struct edu_job, engine_link);
	e->xfers++;
	atomic64_inc(&job->queue->file->client->transfers);
	e->bytes += e->inflight;
	trace_edu_xfer_done(job->owner, job->queue->id, job->seqno);
	/* Unplugged: end the job at this transfer rather than run the rest of it. */
	if (drm_dev_is_unplugged(&edev->drm) && !job->error)
		job->error = -ENODEV;
	if (!job->error && edu_job_next_xfer(job, &x)) {
		trace_edu_xfer_start(job->owner, job->queue->id, job->seqno, x.ram, x.dev_off, x.len,
				     x.to_ram);
		edu_hw_start_xfer(edev, &x);
		e->inflight = x.len;
		goto out;
	}
	edu_engine_set_busy(e, false);
	edu_job_ended_locked(e, job);
	edu_engine_kick_locked(edev);
out:
	wake = edu_engine_needs_thread(e);
	spin_unlock(&e->lock);
	return wake;
}

/* The hard interrupt handler: only chains transfers; the thread does the rest. */
static irqreturn_t edu_engine_irq(int irq, void *arg)
{
	struct edu_accel_device *edev = arg;
	struct edu_engine *e = &edev->engine;
	u32 status = edu_hw_irq_status(edev);

	if (!status)
		return IRQ_NONE;
	if (status == EDU_IRQ_GONE) {	/* surprise removal: it raised nothing */
		WRITE_ONCE(e->lost, true);
		return IRQ_NONE;
	}
	if (!(status & EDU_IRQ_DMA))
		return IRQ_HANDLED;
	return edu_engine_dma_ended(edev) ? IRQ_WAKE_THREAD : IRQ_HANDLED;
}

/* The interrupt's thread: completes ended jobs, starts jobs whose ranges must bounce. */
static irqreturn_t edu_engine_irq_thread(int irq, void *arg)
{
	edu_engine_advance(arg);
	return IRQ_HANDLED;
}

/**
 * edu_engine_request_irq - give the engine the device's interrupt
 * @edev: the device, its engine initialised (a shared line may fire at once)
 * @irq: the interrupt number
 * @flags: IRQF_SHARED for INTx, else 0
 *
 * The hard handler only chains transfers; completions (CPU syncs, fence signalling) run in
 * its thread.
 *
 * Return: 0 or a negative errno.
 */
int edu_engine_request_irq(struct edu_accel_device *edev, unsigned int irq, unsigned long flags)
{
	return devm_request_threaded_irq(&edev->pdev->dev, irq, edu_engine_irq,
					 edu_engine_irq_thread, flags, EDU_ACCEL_NAME, edev);
}

/*
 * Timeout periods in which one transfer may still run before the device is declared wedged.
 * edu ends a transfer within 100 ms; three periods (15 s at the default job_timeout_ms) of
 * the same transfer mean the device will not end it.
 */
#define EDU_WEDGE_PERIODS 3

/*
 * A transfer that never ends: take bus mastering away first, so that no DMA can reach
 * memory once the fences signal and the buffers are unpinned, then declare the device lost
 * (no register is touched again; this job and every later one fail). Only rebinding the
 * driver (unbind, bind) brings the device back. Called unlocked, in process context.
 */
static void edu_engine_wedge(struct edu_accel_device *edev, struct edu_job *job)
{
	struct edu_engine *e = &edev->engine;
	int idx;

	drm_err(&edev->drm,
		"queue %u job %llu: one transfer still runs after %u timeout periods: device wedged, bus mastering off, jobs fail until the driver is bound again\n",
		job->queue->id, job->seqno, EDU_WEDGE_PERIODS);
	if (drm_dev_enter(&edev->drm, &idx)) {
		pci_clear_master(edev->pdev);
		drm_dev_exit(idx);
	}	/* else edu_engine_stop() at unplug has cleared it */
	spin_lock_irq(&e->lock);
	e->wedged = true;
	e->lost = true;
	spin_unlock_irq(&e->lock);
}

/**
 * edu_engine_timeout - the scheduler's timer fired for @job
 * @edev: the device
 * @job: the oldest job the scheduler is waiting for
 *
 * A job that moved since the last look is slow, not stuck (a large copy on a slow machine).
 * One that did not, while the device is idle (its interrupt was lost), is failed with
 * -ETIMEDOUT so that the jobs behind it run. While the device still runs a transfer the job
 * is not failed: its fence must not signal while the device may write its memory; after
 * %EDU_WEDGE_PERIODS such periods the device is wedged (edu_engine_wedge()) and the job fails
 * with -ETIMEDOUT, the ones behind it with -ENODEV. A device that reads all-ones is gone: no
 * DMA can come from it, so its jobs fail with -ENODEV.
 *
 * Return: true when the job was failed now.
 */
bool edu_engine_timeout(struct edu_accel_device *edev, struct edu_job *job)
{
	struct edu_engine *e = &edev->engine;
	unsigned long flags;
	bool failed = false, wedge = false;
	int idx, ret = 0, error = 0;
	u32 cmd = 0;

	/* The thread must not start or complete jobs under our feet. */
	mutex_lock(&e->advance_lock);
	/* A transfer really in flight ends within edu's 100 ms; let it before giving up. */
	if (!READ_ONCE(e->lost)) {
		/*
		 * Unplugged: the engine cannot be asked whether the job's transfer still runs.
		 * Removal waits for it, takes bus mastering away, then fails what remains.
		 */
		if (!drm_dev_enter(&edev->drm, &idx)) {
			mutex_unlock(&e->advance_lock);
			return false;
		}
		ret = edu_hw_wait_idle(edev, 500 * USEC_PER_MSEC, &cmd);
		drm_dev_exit(idx);
	}

	spin_lock_irqsave(&e->lock, flags);
	if (ret && cmd == ~0u && !e->lost) {
		drm_err(&edev->drm, "device reads all-ones: lost\n");
		e->lost = true;
	}
	if (list_first_entry_or_null(&e->jobs, struct edu_job, engine_link) != job)
		goto out;	/* finished meanwhile, or still behind another job */
	/*
	 * Moving first: a long job's next transfer starts as the last one ends, so the device
	 * looks busy at most looks; only a period without one ended transfer counts as stuck.
	 */
	if (!e->lost && e->xfers + e->scrubs != job->progress) {
		job->progress = e->xfers + e->scrubs;
		job->stuck_periods = 0;
		goto out;
	}
	if (ret && !e->lost) {
		if (++job->stuck_periods < EDU_WEDGE_PERIODS) {
			/* Long jobs are normal under emulation: only the verdict goes to the log. */
			drm_dbg_driver(&edev->drm,
				       "queue %u job %llu: transfer still running after 500 ms\n",
				       job->queue->id, job->seqno);
			goto out;
		}
		spin_unlock_irqrestore(&e->lock, flags);
		edu_engine_wedge(edev, job);
		wedge = true;
		spin_lock_irqsave(&e->lock, flags);
		if (list_first_entry_or_null(&e->jobs, struct edu_job, engine_link) != job)
			goto out;	/* its interrupt came after all */
	}
	error = e->lost && !wedge ? -ENODEV : -ETIMEDOUT;
	drm_notice(&edev->drm, "queue %u job %llu made no progress: failing it (%d)\n",
		   job->queue->id, job->seqno, error);
	edu_engine_set_busy(e, false);
	/*
	 * The device is idle (or wedged): whatever ran was this job's transfer (the buffer still
	 * holds its owner's bytes), a clear that may not have happened (the owner stays the
	 * previous one, so the next job clears again) or the self test's.
	 */
	e->scrubbing = false;
	e->kxfer = false;	/* a self-test transfer given up on, still running when it gave up */
	job->error = error;
	edu_job_ended_locked(e, job);
	edu_engine_kick_locked(edev);
	failed = true;
out:
	trace_edu_job_timeout(job->owner, job->queue->id, job->seqno, job->stuck_periods, error);
	spin_unlock_irqrestore(&e->lock, flags);
	if (failed)
		edu_engine_advance_locked(edev);
	mutex_unlock(&e->advance_lock);
	return failed;
}

/**
 * edu_engine_reserve - take the DMA channel for the self test
 * @edev: the device
 *
 * Return: 0, or -EBUSY while jobs are queued.
 */
int edu_engine_reserve(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	int ret = 0;

	spin_lock_irq(&e->lock);
	if (e->reserved || !list_empty(&e->jobs))
		ret = -EBUSY;
	else
		e->reserved = true;
	spin_unlock_irq(&e->lock);
	return ret;
}

/**
 * edu_engine_unreserve - give the DMA channel back and run what queued up meanwhile
 * @edev: the device
 */
void edu_engine_unreserve(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;

	spin_lock_irq(&e->lock);
	e->reserved = false;
	e->owner = 0;	/* the self test's bytes are in the buffer */
	edu_engine_kick_locked(edev);
	spin_unlock_irq(&e->lock);
	edu_engine_advance(edev);
}

/* A reserver's transfer takes 100 ms of virtual time on edu; allow for a loaded host. */
#define EDU_KXFER_TIMEOUT_MS	10000

/**
 * edu_engine_run_xfer - run one transfer for the engine's reserver (the self test) and wait
 * @edev: the device, its engine reserved by the caller (edu_engine_reserve())
 * @x: the transfer; its RAM side mapped for this device
 *
 * The transfer goes through the engine like a job's: the interrupt path ends it only once the
 * device cleared its start bit, so a stray or late interrupt neither ends the wait early nor
 * lets the caller free a buffer the device still writes.
 *
 * Return: 0; -EINVAL for a transfer edu would refuse; -ERANGE for memory past the DMA mask;
 * -ENODEV once the device is lost; -EAGAIN when an earlier transfer given up on still holds
 * the engine (nothing was programmed); -ETIMEDOUT when no interrupt came but the device is
 * idle; -EBUSY when the transfer may still run: its RAM side must then stay allocated (the
 * engine stays busy until its interrupt).
 */
int edu_engine_run_xfer(struct edu_accel_device *edev, const struct edu_xfer *x)
{
	struct edu_engine *e = &edev->engine;
	u32 cmd;
	int ret = 0;

	if (!x->len || x->len > EDU_MAX_XFER || x->dev_off + x->len >= EDU_DEV_BUF_SIZE)
		return -EINVAL;
	/* edu masks rather than rejects a wide address: never hand it one. */
	if (!edu_range_reachable(edev, x->ram, x->len))
		return -ERANGE;

	spin_lock_irq(&e->lock);
	if (e->lost || e->busy) {
		ret = e->lost ? -ENODEV : -EAGAIN;
		spin_unlock_irq(&e->lock);
		return ret;
	}
	reinit_completion(&e->kxfer_done);
	e->kxfer = true;
	edu_engine_set_busy(e, true);
	e->inflight = x->len;
	edu_hw_start_xfer(edev, x);
	if (unlikely(READ_ONCE(edev->fault_selftest_stray_irq)))
		edu_hw_raise_irq(edev, EDU_IRQ_DMA);
	spin_unlock_irq(&e->lock);

	if (wait_for_completion_timeout(&e->kxfer_done, msecs_to_jiffies(EDU_KXFER_TIMEOUT_MS)))
		return 0;
	/* Lost interrupt, or a transfer still running: the caller needs to know which. */
	ret = edu_hw_wait_idle(edev, 1000 * USEC_PER_MSEC, &cmd) ? -EBUSY : -ETIMEDOUT;
	spin_lock_irq(&e->lock);
	if (e->kxfer && ret == -ETIMEDOUT) {
		e->kxfer = false;
		edu_engine_set_busy(e, false);
	} else if (!e->kxfer) {
		ret = 0;	/* its interrupt came after all */
	}
	spin_unlock_irq(&e->lock);
	return ret;
}

/**
 * edu_engine_init - set up the engine of a device
 * @edev: the device
 *
 * Return: 0 or -ENOMEM.
 */
int edu_engine_init(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	int ret;

	/* Coherent, so the device always reads the zeroes: no sync needed around a scrub. */
	e->zero = dmam_alloc_coherent(&edev->pdev->dev, EDU_DEV_BUF_SIZE, &e->zero_dma,
				      GFP_KERNEL);
	if (!e->zero)
		return -ENOMEM;
	spin_lock_init(&e->lock);
	INIT_LIST_HEAD(&e->jobs);
	INIT_LIST_HEAD(&e->done);
	ret = drmm_mutex_init(&edev->drm, &e->advance_lock);
	if (ret)
		return ret;
	init_waitqueue_head(&e->idle);
	init_completion(&e->kxfer_done);
	e->fence_ctx = dma_fence_context_alloc(1);
	return 0;
}

/**
 * edu_engine_stop - the device is unplugged: wait for the transfer in flight, then take bus
 * mastering away, so that no DMA can reach memory once jobs fail and buffers are unpinned
 * @edev: the device
 */
void edu_engine_stop(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	u32 cmd;

	/* Jobs not started fail at once; a running one ends at its current transfer. */
	wait_event_timeout(e->idle, edu_engine_empty(e), 10 * HZ);
	if (!READ_ONCE(e->lost) && edu_hw_wait_idle(edev, 2 * USEC_PER_SEC, &cmd) && cmd != ~0u)
		drm_err(&edev->drm, "DMA still running at removal (cmd 0x%x)\n", cmd);
	pci_clear_master(edev->pdev);
}

/**
 * edu_engine_halt - the system shuts down (or kexecs): no DMA may reach memory after this
 * @edev: the device
 *
 * No transfer is programmed any more (the device counts as lost), the one in flight gets
 * its 100 ms to end, then bus mastering goes. Jobs left are not completed: nothing waits
 * for them now.
 */
void edu_engine_halt(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	bool was_lost;
	u32 cmd;

	spin_lock_irq(&e->lock);
	was_lost = e->lost;
	e->lost = true;
	spin_unlock_irq(&e->lock);
	if (!was_lost && edu_hw_wait_idle(edev, 2 * USEC_PER_SEC, &cmd) && cmd != ~0u)
		drm_err(&edev->drm, "DMA still running at shutdown (cmd 0x%x)\n", cmd);
	pci_clear_master(edev->pdev);
}

/**
 * edu_engine_fini - the device is going away: fail what remains (after edu_engine_stop())
 * @edev: the device
 */
void edu_engine_fini(struct edu_accel_device *edev)
{
	struct edu_engine *e = &edev->engine;
	struct edu_job *job, *tmp;

	mutex_lock(&e->advance_lock);
	spin_lock_irq(&e->lock);
	edu_engine_set_busy(e, false);
	e->scrubbing = false;
	list_for_each_entry_safe(job, tmp, &e->jobs, engine_link) {
		job->error = -ENODEV;
		edu_job_ended_locked(e, job);
	}
	spin_unlock_irq(&e->lock);
	edu_engine_retire(edev);
	mutex_unlock(&e->advance_lock);
}
