/* SPDX-License-Identifier: GPL-2.0 */
#ifndef EDU_ACCEL_JOB_H
#define EDU_ACCEL_JOB_H

#include <drm/drm_file.h>
#include <drm/gpu_scheduler.h>
#include <linux/dma-fence.h>
#include <linux/kref.h>
#include <linux/mutex.h>
#include <linux/ww_mutex.h>
#include <linux/xarray.h>

struct drm_edu_accel_completion;
struct edu_accel_device;
struct edu_bo;
struct edu_client;

#define EDU_MAX_QUEUES		63	/* 64-byte slots in the completion page, then the file's status */
#define EDU_MAX_OPS		64
#define EDU_MAX_SYNCS		16
/* Element sizes of interface 2.0: the smallest strides SUBMIT accepts. */
#define EDU_COPY_OP_MIN_STRIDE	40
#define EDU_SYNC_MIN_STRIDE	16

/**
 * struct edu_file - per open file state; outlives the file while its queues live
 * @ref: held by the open file and by each queue
 * @client: pin accounting, which may outlive the file too (referenced)
 * @lock: protects @queues changes
 * @queues: queue id -> &struct edu_queue of the live queues
 * @slot_lock: protects @slots_busy (taken from the engine's interrupt path)
 * @slots_busy: bit id - 1: the id and its completion slot are taken, by a live queue or by a
 *	destroyed one whose jobs have not all ended (they still write the slot)
 * @completion: the page of completion slots and file status, made at open; it has no GEM
 *	handle (the file may map it: its mmap offset is allowed to the file alone)
 * @jobs: jobs submitted and not yet freed, bounded by the max_jobs_per_file parameter
 */
struct edu_file {
	struct kref ref;
	struct edu_client *client;
	struct mutex lock;
	struct xarray queues;
	spinlock_t slot_lock;
	unsigned long slots_busy;
	struct edu_bo *completion;
	atomic_t jobs;
};

/**
 * struct edu_queue - a stream: a scheduler entity whose jobs run in submission order
 * @ref: held by the file until the queue is destroyed, and by every job of the queue
 * @edev: the device
 * @file: the file state that owns the id and the slot (referenced)
 * @entity: the drm_sched entity
 * @completion: page holding @slot; referenced so jobs may outlive the file
 * @slot: this queue's completion slot, written by the engine
 * @id: queue id within its file
 * @priority: DRM_EDU_ACCEL_QUEUE_PRIORITY_* it runs at (DEFAULT resolved to NORMAL)
 * @submit_lock: keeps sequence numbers in the order jobs reach the entity
 * @next_seqno: last sequence number handed out
 * @pending: jobs submitted that have not yet written their completion
 * @slot_freed: bit 0: the id and slot went back to the file (once)
 * @dead: destroyed (under the file's lock and @submit_lock): lookups fail, and a submit that
 *	raced with the destroy must not reach the entity
 * @cancel: its exiting process's jobs not yet handed over fail at run_job (-ESRCH) instead of
 *	being killed in their entity (edu_queue_drain())
 */
struct edu_queue {
	struct kref ref;
	struct edu_accel_device *edev;
	struct edu_file *file;
	struct drm_sched_entity entity;
	struct edu_bo *completion;
	struct drm_edu_accel_completion *slot;
	u32 id;
	u32 priority;
	struct mutex submit_lock;
	u64 next_seqno;
	atomic_t pending;
	unsigned long slot_freed;
	bool dead;
	bool cancel;
};

/**
 * struct edu_op - one validated copy; BOs are referenced by the job
 * @type: DRM_EDU_ACCEL_OP_*
 * @src: source BO or NULL (D2H)
 * @dst: destination BO or NULL (H2D)
 * @src_off: offset in the source's scatter-gather table (BO offset + page offset)
 * @dst_off: likewise for the destination, or the device buffer offset (H2D)
 * @size: bytes
 */
struct edu_op {
	u32 type;
	struct edu_bo *src;
	struct edu_bo *dst;
	u64 src_off;
	u64 dst_off;
	u64 size;
};

/**
 * struct edu_sg_cursor - position in a BO's DMA segments, moving forward only
 * @sg: current segment, NULL before the first lookup
 * @base: scatter-gather offset at which @sg starts
 */
struct edu_sg_cursor {
	struct scatterlist *sg;
	u64 base;
};

/**
 * struct edu_resv_set - the reservation objects of a job's shared BOs, locked during SUBMIT
 * @ctx: the ww acquire context of the locks
 * @objs: one BO per reservation object
 * @write: the job writes @objs[i]
 * @count: entries used
 * @locked: the reservations are held
 */
struct edu_resv_set {
	struct ww_acquire_ctx ctx;
	struct drm_gem_object **objs;
	bool *write;
	u32 count;
	bool locked;
};

/**
 * struct edu_job - one SUBMIT: copies run in order after the in-fences
 * @base: the scheduler job
 * @queue: its queue (referenced)
 * @owner: id of the client whose bytes the job puts in the device buffer
 * @seqno: sequence number on the queue
 * @hw_fence: signalled by the engine when the last transfer ends (engine's reference)
 * @hw_fence_mem: the hardware fence, allocated at SUBMIT because run_job must not allocate;
 *	NULL once the engine has initialised it
 * @in_fences: the in-syncs' fences (referenced): a failed one cancels the job
 * @nin: entries of @in_fences
 * @error: set when the job must not (or did not) complete normally
 * @started: the engine has looked at the job at its head (and at its in-fences)
 * @start_time: when it did (the job's engine time runs from here to its last transfer's end)
 * @synced: the job's ranges were handed to the device at the head, so they go back to the
 *	CPU when it ends (a job failed before then never gave them away)
 * @retired: the job wrote its completion (or was killed before it could)
 * @engine_link: entry in the engine's queue
 * @free_node: entry in &edu_accel_device.free_jobs once the scheduler is done with it
 * @progress: engine transfer count when the timeout handler last looked
 * @stuck_periods: consecutive timeout periods in which the device still ran one transfer
 * @nops: entries of @ops
 * @cur_op: op in progress
 * @done: bytes of @cur_op issued to the device (H2H: stored back)
 * @storing: H2H chunk is in its device -> RAM half
 * @chunk: H2H bytes in the current chunk
 * @chunk_pos: bytes of the current chunk half issued
 * @src_cur: DMA segment cursor in the source
 * @dst_cur: DMA segment cursor in the destination
 * @ops: the copies
 */
struct edu_job {
	struct drm_sched_job base;
	struct edu_queue *queue;
	u64 owner;
	u64 seqno;
	struct dma_fence *hw_fence;
	struct dma_fence *hw_fence_mem;
	struct dma_fence *in_fences[EDU_MAX_SYNCS];
	u32 nin;
	int error;
	bool started;
	ktime_t start_time;
	bool synced;
	bool retired;
	struct list_head engine_link;
	struct llist_node free_node;
	u64 progress;
	u32 stuck_periods;
	u32 nops;
	u32 cur_op;
	u64 done;
	bool storing;
	u32 chunk;
	u32 chunk_pos;
	struct edu_sg_cursor src_cur;
	struct edu_sg_cursor dst_cur;
	struct edu_op ops[];
};

static inline struct edu_job *to_edu_job(struct drm_sched_job *job)
{
	return container_of(job, struct edu_job, base);
}

int edu_fences_init(void);
int edu_sched_init(struct edu_accel_device *edev);
void edu_sched_drain(struct edu_accel_device *edev);
void edu_job_free_work(struct work_struct *work);
int edu_file_open(struct drm_file *file, struct edu_client *client);
void edu_file_close(struct drm_file *file);
int edu_ioctl_queue_create(struct drm_device *drm, void *data, struct drm_file *file);
int edu_ioctl_queue_destroy(struct drm_device *drm, void *data, struct drm_file *file);
int edu_ioctl_submit(struct drm_device *drm, void *data, struct drm_file *file);
u64 edu_max_job_bytes(void);

void edu_queue_job_retired(struct edu_queue *q);
void edu_queue_put(struct edu_queue *q);
void edu_job_free(struct edu_job *job);
struct edu_bo *edu_file_status_page(struct drm_file *file);

static inline struct edu_client *edu_file_client(struct drm_file *file)
{
	return ((struct edu_file *)file->driver_priv)->client;
}

/* edu_accel_resv.c: implicit sync on shared BOs (other drivers' and devices' fences) */
int edu_job_lock_shared(struct edu_accel_device *edev, struct edu_job *job,
			struct edu_resv_set *set);
void edu_resv_publish(struct edu_resv_set *set, struct dma_fence *fence);
void edu_resv_unlock(struct edu_resv_set *set);
int edu_ioctl_bo_wait(struct drm_device *drm, void *data, struct drm_file *file);

#endif /* EDU_ACCEL_JOB_H */
