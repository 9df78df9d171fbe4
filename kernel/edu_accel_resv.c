// SPDX-License-Identifier: GPL-2.0
/*
 * Implicit sync: jobs on shared BOs order with other drivers' work through the BOs'
 * reservation objects (dma_resv), as every driver that shares buffers does.
 *
 * A BO is shared while it is imported or exported. A job touching shared BOs waits for the
 * other devices' and drivers' fences already on them (a writer for every earlier user, a
 * reader for earlier writers) and
 * leaves its own fence there, with write usage on the BOs it writes. Private BOs take no lock
 * and get no fence: between our own queues syncobjs are the order, and a submit that touches
 * no shared BO costs nothing here.
 */
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_utils.h>
#include <drm/gpu_scheduler.h>
#include <linux/dma-resv.h>
#include <linux/slab.h>

#include "edu_accel_drv.h"
#include "edu_accel_gem.h"
#include "edu_accel_job.h"

static bool edu_bo_shared(struct edu_bo *bo)
{
	return bo->import_buf || READ_ONCE(bo->base.dma_buf);
}

/* Adds @bo once per reservation object (two imports can share one; locking twice fails). */
static void edu_resv_add(struct edu_resv_set *set, struct edu_bo *bo, bool write)
{
	u32 i;

	if (!bo || !edu_bo_shared(bo))
		return;
	for (i = 0; i < set->count; i++) {
		if (set->objs[i]->resv == bo->base.resv) {
			set->write[i] |= write;
			return;
		}
	}
	set->objs[set->count] = &bo->base;
	set->write[set->count++] = write;
}

/*
 * drm_sched_job_add_implicit_dependencies() without this device's own fences: between our
 * queues syncobjs are the order (a job never waits for our earlier jobs implicitly, on shared
 * BOs no more than on private ones). It also keeps killed entities' queued jobs free of
 * dependencies they would wait for, after which 6.1's drm_sched_entity_kill_jobs() leaks
 * the entity's last scheduled fence (see EDU_SCHED_CREDITS).
 */
static int edu_job_add_foreign_fences(struct edu_accel_device *edev, struct edu_job *job,
				      struct dma_resv *resv, bool write)
{
	struct dma_resv_iter cursor;
	struct drm_sched_fence *own;
	struct dma_fence *fence;
	int ret;

	dma_resv_for_each_fence(&cursor, resv, dma_resv_usage_rw(write), fence) {
		own = to_drm_sched_fence(fence);
		if (own && own->sched == &edev->sched)
			continue;
		/* Consumes the reference, on error too. */
		ret = drm_sched_job_add_dependency(&job->base, dma_fence_get(fence));
		if (ret)
			return ret;
	}
	return 0;
}

/**
 * edu_job_lock_shared - lock the reservations of the job's shared BOs and make the job depend
 * on the fences already there
 * @edev: the device
 * @job: the job, initialised, not yet armed
 * @set: out; on success the caller calls edu_resv_publish() once armed, then edu_resv_unlock()
 *
 * Return: 0, -EINTR/-ERESTARTSYS from the locks, or -ENOMEM.
 */
int edu_job_lock_shared(struct edu_accel_device *edev, struct edu_job *job,
			struct edu_resv_set *set)
{
	u32 i, n = 0;
	int ret;

	memset(set, 0, sizeof(*set));
	for (i = 0; i < job->nops; i++)
		n += (job->ops[i].src && edu_bo_shared(job->ops[i].src)) +
		     (job->ops[i].dst && edu_bo_shared(job->ops[i].dst));
	if (!n)
		return 0;
	set->objs = kcalloc(n, sizeof(*set->objs), GFP_KERNEL_ACCOUNT);
	set->write = kcalloc(n, sizeof(*set->write), GFP_KERNEL_ACCOUNT);
	if (!set->objs || !set->write) {
		ret = -ENOMEM;
		goto free;
	}
	for (i = 0; i < job->nops; i++) {
		edu_resv_add(set, job->ops[i].src, false);
		edu_resv_add(set, job->ops[i].dst, true);
	}
	ret = drm_gem_lock_reservations(set->objs, set->count, &set->ctx);
	if (ret)
		goto free;
	for (i = 0; i < set->count; i++) {
		ret = dma_resv_reserve_fences(set->objs[i]->resv, 1);
		if (!ret)
			ret = edu_job_add_foreign_fences(edev, job, set->objs[i]->resv,
							 set->write[i]);
		if (ret) {
			drm_gem_unlock_reservations(set->objs, set->count, &set->ctx);
			goto free;
		}
	}
	set->locked = true;
	return 0;

free:
	kfree(set->objs);
	kfree(set->write);
	memset(set, 0, sizeof(*set));
	return ret;
}

/**
 * edu_resv_publish - leave the armed job's fence on its shared BOs
 * @set: locked by edu_job_lock_shared()
 * @fence: the job's finished fence
 */
void edu_resv_publish(struct edu_resv_set *set, struct dma_fence *fence)
{
	u32 i;

	for (i = 0; i < set->count; i++)
		dma_resv_add_fence(set->objs[i]->resv, fence,
				   set->write[i] ? DMA_RESV_USAGE_WRITE : DMA_RESV_USAGE_READ);
}

/**
 * edu_resv_unlock - unlock what edu_job_lock_shared() locked
 * @set: the set (nothing to do when the job had no shared BO)
 */
void edu_resv_unlock(struct edu_resv_set *set)
{
	if (set->locked)
		drm_gem_unlock_reservations(set->objs, set->count, &set->ctx);
	kfree(set->objs);
	kfree(set->write);
	memset(set, 0, sizeof(*set));
}

/* DRM_IOCTL_EDU_ACCEL_BO_WAIT */
int edu_ioctl_bo_wait(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_bo_wait *args = data;
	struct drm_gem_object *obj;
	long ret;

	if (args->flags & ~DRM_EDU_ACCEL_BO_WAIT_READERS)
		return -EINVAL;
	obj = drm_gem_object_lookup(file, args->handle);
	if (!obj)
		return -ENOENT;
	ret = dma_resv_wait_timeout(obj->resv,
				    dma_resv_usage_rw(args->flags & DRM_EDU_ACCEL_BO_WAIT_READERS),
				    true, drm_timeout_abs_to_jiffies(args->timeout_ns));
	drm_gem_object_put(obj);
	if (ret < 0)
		return ret;
	return ret ? 0 : -ETIME;
}
