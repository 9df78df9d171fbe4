/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * edu_accel: the ioctl contract between the edu_accel DRM driver and userspace.
 *
 * Rules that hold for every ioctl below:
 *  - every struct is 64-bit aligned with explicit padding; pad fields and unknown flag bits
 *    must be zero or the call fails with -EINVAL, so they can gain meaning later;
 *  - pointers travel as __u64;
 *  - "out" fields are written only on success;
 *  - a structure may grow at its end: the kernel zero-fills what an older binary did not pass
 *    (DRM's ioctl core copies min(user size, kernel size) and zeroes the rest);
 *  - every ioctl fails with -ENODEV once the device is gone (unbound, removed); jobs still
 *    queued then end with -ENODEV; closing the file releases everything.
 *
 * Device memory: edu's 4 KiB buffer is shared hardware, but no file can observe or alter
 * bytes another file put there. Before a job of one file moves a byte, the driver clears the
 * buffer if another file's job (or the driver's self test) used it last. Within one file,
 * the buffer keeps its contents from job to job only while no other file's job runs in
 * between; within one job, always. H2H copies stage through the buffer and leave it undefined.
 */
#ifndef _UAPI_EDU_ACCEL_H_
#define _UAPI_EDU_ACCEL_H_

#include "drm.h"

#if defined(__cplusplus)
extern "C" {
#endif

#define DRM_EDU_ACCEL_GET_PARAM		0x00
#define DRM_EDU_ACCEL_BO_CREATE		0x01
#define DRM_EDU_ACCEL_BO_USERPTR	0x02
#define DRM_EDU_ACCEL_BO_INFO		0x03
#define DRM_EDU_ACCEL_QUEUE_CREATE	0x04
#define DRM_EDU_ACCEL_QUEUE_DESTROY	0x05
#define DRM_EDU_ACCEL_SUBMIT		0x06

#define DRM_IOCTL_EDU_ACCEL_GET_PARAM \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_EDU_ACCEL_GET_PARAM, struct drm_edu_accel_get_param)
#define DRM_IOCTL_EDU_ACCEL_BO_CREATE \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_EDU_ACCEL_BO_CREATE, struct drm_edu_accel_bo_create)
#define DRM_IOCTL_EDU_ACCEL_BO_USERPTR \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_EDU_ACCEL_BO_USERPTR, struct drm_edu_accel_bo_userptr)
#define DRM_IOCTL_EDU_ACCEL_BO_INFO \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_EDU_ACCEL_BO_INFO, struct drm_edu_accel_bo_info)
#define DRM_IOCTL_EDU_ACCEL_QUEUE_CREATE \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_EDU_ACCEL_QUEUE_CREATE, struct drm_edu_accel_queue_create)
#define DRM_IOCTL_EDU_ACCEL_QUEUE_DESTROY \
	DRM_IOW(DRM_COMMAND_BASE + DRM_EDU_ACCEL_QUEUE_DESTROY, struct drm_edu_accel_queue_destroy)
#define DRM_IOCTL_EDU_ACCEL_SUBMIT \
	DRM_IOWR(DRM_COMMAND_BASE + DRM_EDU_ACCEL_SUBMIT, struct drm_edu_accel_submit)

/**
 * enum drm_edu_accel_param - what DRM_IOCTL_EDU_ACCEL_GET_PARAM can report
 * @EDU_ACCEL_PARAM_DRIVER_VERSION: (major << 16) | minor of the interface; minor grows when
 *	something is added, major when something is removed.
 * @EDU_ACCEL_PARAM_DMA_MASK_BITS: width of the device's DMA addresses.
 * @EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE: bytes of device memory (edu's buffer: 4096).
 * @EDU_ACCEL_PARAM_MAX_TRANSFER: largest single device transfer (4095 on QEMU 7.2).
 * @EDU_ACCEL_PARAM_IOMMU: 1 when DMA goes through a translating IOMMU, else 0.
 * @EDU_ACCEL_PARAM_MAX_BO_SIZE: largest size BO_CREATE or BO_USERPTR accepts.
 * @EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE: largest DMA segment the device's mappings use.
 * @EDU_ACCEL_PARAM_MAX_QUEUES: queues one open file may have at once.
 * @EDU_ACCEL_PARAM_MAX_OPS: copy operations one SUBMIT may carry.
 * @EDU_ACCEL_PARAM_PINNED_BYTES: bytes this file currently has pinned (userptr) or allocated
 *	(BO_CREATE), as charged to it.
 * @EDU_ACCEL_PARAM_COMPLETION_HANDLE: GEM handle of this file's completion page (created on
 *	first use; the same page QUEUE_CREATE reports), where &struct drm_edu_accel_file_status
 *	sits at %DRM_EDU_ACCEL_FILE_STATUS_OFFSET.
 */
enum drm_edu_accel_param {
	EDU_ACCEL_PARAM_DRIVER_VERSION = 0,
	EDU_ACCEL_PARAM_DMA_MASK_BITS = 1,
	EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE = 2,
	EDU_ACCEL_PARAM_MAX_TRANSFER = 3,
	EDU_ACCEL_PARAM_IOMMU = 4,
	EDU_ACCEL_PARAM_MAX_BO_SIZE = 5,
	EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE = 6,
	EDU_ACCEL_PARAM_MAX_QUEUES = 7,
	EDU_ACCEL_PARAM_MAX_OPS = 8,
	EDU_ACCEL_PARAM_PINNED_BYTES = 9,
	EDU_ACCEL_PARAM_COMPLETION_HANDLE = 10,
};

/**
 * struct drm_edu_accel_get_param - query one capability or limit
 * @param: in, an &enum drm_edu_accel_param; unknown values fail with -EINVAL
 * @pad: in, must be zero
 * @value: out, the value
 *
 * Errors: -EINVAL (unknown @param, nonzero @pad), -ENOMEM (COMPLETION_HANDLE could not
 * create the page), -ENODEV.
 */
struct drm_edu_accel_get_param {
	__u32 param;
	__u32 pad;
	__u64 value;
};

/**
 * struct drm_edu_accel_bo_create - allocate pinned host memory the device can reach
 * (the cudaHostAlloc / aclrtMallocHost analogue)
 * @size: in, bytes, 1..MAX_BO_SIZE; rounded up to whole pages
 * @flags: in, must be zero (no flags are defined yet)
 * @handle: out, GEM handle; release with DRM_IOCTL_GEM_CLOSE
 * @mmap_offset: out, offset for mmap(2) on this file; the mapping must be MAP_SHARED
 *
 * The memory is zeroed, allocated where the device can reach it, stays resident and
 * DMA-mapped for the device until the last reference (handle, mapping, queued job) is gone.
 * It is charged to the caller's RLIMIT_MEMLOCK (unless CAP_IPC_LOCK), as BO_USERPTR is.
 * Mappings are not inherited by fork() children (VM_DONTCOPY): a child sees no mapping
 * there. MADV_DONTNEED on a mapping is harmless: the next touch maps the same page again.
 *
 * Errors: -EINVAL (@size 0 or above MAX_BO_SIZE, nonzero @flags), -ENOMEM (no memory the
 * device can reach, or past RLIMIT_MEMLOCK), -EPERM (RLIMIT_MEMLOCK is zero), -EINTR
 * (a fatal signal while allocating), -ENODEV.
 */
struct drm_edu_accel_bo_create {
	__u64 size;
	__u32 flags;
	__u32 handle;
	__u64 mmap_offset;
};

/* The device only reads this memory (it is a copy source): no FOLL_WRITE, read-only pages OK. */
#define EDU_ACCEL_BO_USERPTR_READONLY	(1u << 0)
#define EDU_ACCEL_BO_USERPTR_FLAGS	EDU_ACCEL_BO_USERPTR_READONLY

/**
 * struct drm_edu_accel_bo_userptr - pin an existing range of this process's memory for the
 * device (the cudaHostRegister analogue)
 * @user_ptr: in, start of the range; need not be page aligned
 * @size: in, bytes, 1..MAX_BO_SIZE; need not be page aligned
 * @flags: in, EDU_ACCEL_BO_USERPTR_*
 * @handle: out, GEM handle; DRM_IOCTL_GEM_CLOSE unpins once no job uses the memory
 *
 * The pages covering the range are pinned (FOLL_LONGTERM) and charged to RLIMIT_MEMLOCK
 * unless the caller has CAP_IPC_LOCK: -ENOMEM past the limit, -EPERM when the limit is zero.
 * Offsets in copy operations on this BO count from @user_ptr, not from its page.
 * -EFAULT: part of the range is not mapped, or is read-only without the READONLY flag.
 * -ERANGE: the device cannot address some of the pages (no IOMMU, pages above its DMA mask).
 * -EOPNOTSUPP: a writable registration of a file mapping other than tmpfs/shmem or hugetlbfs
 *	(a long-term pin of page cache the filesystem writes back); READONLY is accepted.
 * -EBUSY: the range kept changing while it was being pinned.
 * -ETOOMANYREFS: a writable registration whose pages are already registered writable
 *	8 times on this device (by any files): the DMA API supports only so many overlapping
 *	mappings the device writes. READONLY registrations are not counted.
 *
 * The pages stay pinned until the BO is freed, whatever happens to the range. When the range
 * is unmapped, remapped or its pages dropped (munmap, mremap, MADV_DONTNEED), the BO is
 * marked invalid (BO_INFO flag %EDU_ACCEL_BO_INFO_INVALIDATED), the file's
 * &drm_edu_accel_file_status.invalidations grows, and SUBMIT naming the BO fails with
 * -ESTALE: register the range again. Jobs queued before keep using the old pages.
 * Protection changes and fork() do not invalidate (a pinned page stays the parent's).
 */
struct drm_edu_accel_bo_userptr {
	__u64 user_ptr;
	__u64 size;
	__u32 flags;
	__u32 handle;
};

/* BO_INFO flags */
#define EDU_ACCEL_BO_INFO_USERPTR	(1u << 0)	/* made by BO_USERPTR */
#define EDU_ACCEL_BO_INFO_READONLY	(1u << 1)	/* the device may only read it */
/* userptr: the range was unmapped or remapped since registration; SUBMIT refuses the BO */
#define EDU_ACCEL_BO_INFO_INVALIDATED	(1u << 2)

/**
 * struct drm_edu_accel_bo_info - describe a BO
 * @handle: in, GEM handle of this file
 * @flags: out, EDU_ACCEL_BO_INFO_* (%EDU_ACCEL_BO_INFO_INVALIDATED for a userptr BO whose
 *	range changed since it was registered)
 * @size: out, usable bytes (the size passed at creation, rounded up to pages for BO_CREATE)
 * @mmap_offset: out, for BO_CREATE objects; 0 for userptr objects
 * @user_ptr: out, for userptr objects the registered start; 0 otherwise
 * @sg_nents: out, entries of the CPU scatter-gather table (physically contiguous runs, each
 *	at most MAX_SEGMENT_SIZE)
 * @dma_nents: out, DMA segments after mapping (an IOMMU can merge entries into one); 0 for
 *	the completion page, which the device never accesses
 *
 * Physical and DMA addresses are not reported here; root can read them in debugfs.
 *
 * Errors: -ENOENT (no such handle in this file), -ENODEV.
 */
struct drm_edu_accel_bo_info {
	__u32 handle;
	__u32 flags;
	__u64 size;
	__u64 mmap_offset;
	__u64 user_ptr;
	__u32 sg_nents;
	__u32 dma_nents;
};

/**
 * struct drm_edu_accel_completion - one queue's slot in the completion page
 * The completion page holds MAX_QUEUES (63) of these, then the file's
 * &struct drm_edu_accel_file_status at %DRM_EDU_ACCEL_FILE_STATUS_OFFSET.
 *
 * @completed: last sequence number whose job has finished (successfully or not)
 * @failed: last sequence number whose job failed, 0 if none
 * @error: negative errno of that failure (-ETIMEDOUT, -EIO, -ECANCELED ...)
 * @pad: zero
 * @reserved: zero; keeps slots 64 bytes apart
 *
 * The driver writes @failed and @error before @completed, so a reader who sees
 * completed >= N and then reads failed < N knows job N succeeded.
 */
struct drm_edu_accel_completion {
	__u64 completed;
	__u64 failed;
	__s32 error;
	__u32 pad;
	__u64 reserved[5];
};

/* Offset of &struct drm_edu_accel_file_status in the completion page. */
#define DRM_EDU_ACCEL_FILE_STATUS_OFFSET	4032

/**
 * struct drm_edu_accel_file_status - the file's part of its completion page
 * @invalidations: grows each time one of the file's userptr BOs is invalidated; a cache of
 *	registrations compares it with the value it last saw (one memory read) before trusting
 *	an entry
 * @reserved: zero
 */
struct drm_edu_accel_file_status {
	__u64 invalidations;
	__u64 reserved[7];
};

/**
 * struct drm_edu_accel_queue_create - create a queue (a stream): jobs run in submission order
 * @flags: in, must be zero
 * @queue: out, queue id, valid in this file only
 * @completion_handle: out, GEM handle of this file's completion page (the same for every
 *	queue of the file); mmap it PROT_READ, MAP_SHARED at its BO_INFO mmap_offset
 * @completion_offset: out, byte offset of this queue's &struct drm_edu_accel_completion in
 *	that page
 *
 * A queue's id and slot are not handed to a new queue before every job of the old one has
 * ended (QUEUE_DESTROY does not wait for that).
 *
 * Errors: -EINVAL (nonzero @flags), -ENOSPC (MAX_QUEUES queues, counting destroyed ones
 * whose jobs still run), -ENOMEM, -ENODEV.
 */
struct drm_edu_accel_queue_create {
	__u32 flags;
	__u32 queue;
	__u32 completion_handle;
	__u32 completion_offset;
};

/**
 * struct drm_edu_accel_queue_destroy - destroy a queue; jobs already submitted still run
 * @queue: in, queue id
 * @pad: in, must be zero
 *
 * It may sleep until the queue's jobs have reached the engine (not until they end), without
 * holding up the device's removal.
 *
 * Errors: -EINVAL (nonzero @pad), -ENOENT (no such queue, or already destroyed), -ENODEV.
 */
struct drm_edu_accel_queue_destroy {
	__u32 queue;
	__u32 pad;
};

/**
 * enum drm_edu_accel_op_type - what one copy operation does
 * @EDU_ACCEL_OP_H2D: BO range -> device buffer; @dst_handle must be 0, @dst_offset is a
 *	device buffer offset and @dst_offset + @size <= MAX_TRANSFER
 * @EDU_ACCEL_OP_D2H: device buffer -> BO range; @src_handle must be 0, likewise for @src_offset
 * @EDU_ACCEL_OP_H2H: BO range -> BO range of any size, staged through the device buffer
 */
enum drm_edu_accel_op_type {
	EDU_ACCEL_OP_H2D = 1,
	EDU_ACCEL_OP_D2H = 2,
	EDU_ACCEL_OP_H2H = 3,
};

/**
 * struct drm_edu_accel_copy_op - one copy inside a job
 * @type: an &enum drm_edu_accel_op_type
 * @flags: must be zero
 * @src_handle: source BO (0 for D2H)
 * @dst_handle: destination BO (0 for H2D)
 * @src_offset: byte offset in the source
 * @dst_offset: byte offset in the destination
 * @size: bytes, at least 1
 */
struct drm_edu_accel_copy_op {
	__u32 type;
	__u32 flags;
	__u32 src_handle;
	__u32 dst_handle;
	__u64 src_offset;
	__u64 dst_offset;
	__u64 size;
};

/**
 * struct drm_edu_accel_sync - a point on a DRM syncobj
 * @handle: syncobj handle of this file
 * @pad: must be zero
 * @point: timeline point; 0 for a binary syncobj
 */
struct drm_edu_accel_sync {
	__u32 handle;
	__u32 pad;
	__u64 point;
};

/**
 * struct drm_edu_accel_submit - queue one job: its copies run in order, after every in-sync
 * has signalled and after the previous job of the same queue
 * @queue: in, queue id
 * @flags: in, must be zero
 * @ops: in, pointer to an array of &struct drm_edu_accel_copy_op
 * @op_count: in, 1..MAX_OPS
 * @in_sync_count: in, entries of @in_syncs
 * @in_syncs: in, pointer to &struct drm_edu_accel_sync that must signal before the job runs
 * @out_syncs: in, pointer to &struct drm_edu_accel_sync signalled when the job ends
 *	(timeline points are added; binary syncobjs have their fence replaced)
 * @out_sync_count: in, entries of @out_syncs
 * @pad: in, must be zero
 * @seqno: out, the job's sequence number on its queue (1, 2, 3 ...); the queue's completion
 *	slot reaches it when the job has ended
 *
 * Everything is validated before anything is queued: ranges against their BOs (and the
 * device buffer), write access to destinations, handles, syncobjs. The job holds a reference
 * on every BO it names until it ends, so closing handles or the file cannot free memory the
 * device still uses.
 *
 * A job whose in-sync fence failed does not run: it ends with -ECANCELED. A job's error
 * (-ETIMEDOUT when the device stopped answering, -ECANCELED, -ENODEV after removal) is in
 * its queue's completion slot and on its out-sync fences (sync_file status, syncobj
 * queries). Jobs one file has submitted and not yet retired are bounded (module parameter
 * max_jobs_per_file, default 256), and one job carries at most max_job_mib MiB of device
 * traffic (default 16, H2H counted twice) so that no job holds the one engine for long:
 * split larger copies into several jobs.
 *
 * Errors: -EINVAL (nonzero @flags/@pad/op flags/sync pad, @op_count 0 or above MAX_OPS,
 * more than 16 in- or out-syncs, unknown op type, a handle where none belongs, a range
 * outside its BO or past MAX_TRANSFER on the device side, size 0), -ENOENT (unknown queue,
 * BO handle or syncobj of this file), -EACCES (a write into a READONLY registration, or
 * a copy naming the completion page), -ESTALE (an invalidated userptr BO), -EFAULT (an
 * unreadable array), -EBUSY (max_jobs_per_file reached), -E2BIG (over max_job_mib),
 * -ENOMEM, -ENODEV.
 */
struct drm_edu_accel_submit {
	__u32 queue;
	__u32 flags;
	__u64 ops;
	__u32 op_count;
	__u32 in_sync_count;
	__u64 in_syncs;
	__u64 out_syncs;
	__u32 out_sync_count;
	__u32 pad;
	__u64 seqno;
};

#if defined(__cplusplus)
}
#endif

#endif /* _UAPI_EDU_ACCEL_H_ */
