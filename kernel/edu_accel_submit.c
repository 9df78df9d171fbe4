// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel SUBMIT: validates every op, takes a reference on every BO a job touches
 * (released only when the job is freed, after its fence signalled), turns in-fences into
 * scheduler dependencies and out-syncobjs into points on the job's finished fence.
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

static unsigned int max_jobs_per_file = 256;
module_param(max_jobs_per_file, uint, 0444);
MODULE_PARM_DESC(max_jobs_per_file,
		 "Jobs one open file may have submitted and not yet freed; SUBMIT fails with -EBUSY past it (default 256)");

static unsigned int max_job_mib = 16;
module_param(max_job_mib, uint, 0444);
MODULE_PARM_DESC(max_job_mib,
		 "Device traffic one job may carry, in MiB (H2H counts twice); SUBMIT fails with -EMSGSIZE past it, so no job holds the one engine for long (default 16)");

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
		ret = -EMSGSIZE;
		goto put;
	}
	return job;

put:
	edu_job_free(job);
	return ERR_PTR(ret);
}

/* Binary syncs carry no point, timeline syncs a nonzero one: a zero point is never a guess. */
static bool edu_sync_valid(const struct drm_edu_accel_sync *s)
{
	if (s->flags & ~DRM_EDU_ACCEL_SYNC_FLAGS)
		return false;
	return !!(s->flags & DRM_EDU_ACCEL_SYNC_TIMELINE) == !!s->point;
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
		if (!edu_sync_valid(&s))
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
EDU_ALLOW_ERROR_INJECTION(edu_job_add_in_syncs, ERRNO);

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
		if (!edu_sync_valid(&s)) {
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
	if (args->flags || args->extensions || !args->ops.count)
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
