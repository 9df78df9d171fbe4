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
 *  - every ioctl fails with -ENODEV once the device is gone (unbound, removed), except
 *    QUEUE_DESTROY and BO_WAIT, which release and wait and work as before; jobs still queued
 *    then end with -ENODEV; closing the file releases everything.
 *
 * CPU ownership: a range a job names belongs to the device from SUBMIT until the job has
 * ended (its completion slot or an out-sync says so). The CPU may read a range the job only
 * reads; anything else (writing such a range, or touching a range the job writes) gives
 * undefined bytes: where the DMA layer bounces (swiotlb, confidential guests) the driver
 * copies whole ranges in and out at the job's start and end.
 *
 * Device memory: edu's 4 KiB buffer is shared hardware. Its contents are undefined at the
 * start of each job: a job reads back only what it wrote there itself (H2H copies stage
 * through the buffer and leave it undefined). No file can observe or alter bytes another
 * file put there: before a job of one file moves a byte, the driver clears the buffer if
 * another file's job (or the driver's self test) used it last.
 */
#ifndef _UAPI_EDU_ACCEL_H_
#define _UAPI_EDU_ACCEL_H_

#include "drm.h"

#if defined(__cplusplus)
extern "C" {
#endif

/*
 * The interface version, one number for both ways of asking: DRM_IOCTL_VERSION reports it as
 * major.minor, GET_PARAM %DRM_EDU_ACCEL_PARAM_DRIVER_VERSION as (major << 16) | minor. The
 * minor grows when something is added, the major when something changes or goes away.
 * 2.0: SUBMIT arrays carry their element stride, QUEUE_CREATE a priority, DRM_ prefixes.
 * 2.1: PRIME export and import, implicit sync on shared BOs, BO_WAIT.
 * 3.0: GET_PARAM has no side effects: the completion page exists from open on and has no GEM
 *      handle (%DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET replaces COMPLETION_HANDLE, and
 *      QUEUE_CREATE reports only the slot's offset); syncs say binary or timeline with
 *      %DRM_EDU_ACCEL_SYNC_TIMELINE instead of by their point; priorities are ordered by
 *      value (0 is the default); the job budget fails with -EMSGSIZE; SUBMIT has an
 *      extensions field; the completion page carries its layout version.
 */
#define DRM_EDU_ACCEL_VERSION_MAJOR	3
#define DRM_EDU_ACCEL_VERSION_MINOR	0

#define DRM_EDU_ACCEL_GET_PARAM		0x00
#define DRM_EDU_ACCEL_BO_CREATE		0x01
#define DRM_EDU_ACCEL_BO_USERPTR	0x02
#define DRM_EDU_ACCEL_BO_INFO		0x03
#define DRM_EDU_ACCEL_QUEUE_CREATE	0x04
#define DRM_EDU_ACCEL_QUEUE_DESTROY	0x05
#define DRM_EDU_ACCEL_SUBMIT		0x06
#define DRM_EDU_ACCEL_BO_WAIT		0x07

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
#define DRM_IOCTL_EDU_ACCEL_BO_WAIT \
	DRM_IOW(DRM_COMMAND_BASE + DRM_EDU_ACCEL_BO_WAIT, struct drm_edu_accel_bo_wait)

/**
 * enum drm_edu_accel_param - what DRM_IOCTL_EDU_ACCEL_GET_PARAM can report
 * @DRM_EDU_ACCEL_PARAM_DRIVER_VERSION: (%DRM_EDU_ACCEL_VERSION_MAJOR << 16) |
 *	%DRM_EDU_ACCEL_VERSION_MINOR of the running driver.
 * @DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS: width of the device's DMA addresses.
 * @DRM_EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE: bytes of device memory (edu's buffer: 4096).
 * @DRM_EDU_ACCEL_PARAM_MAX_TRANSFER: largest single device transfer (4095 on QEMU 7.2).
 * @DRM_EDU_ACCEL_PARAM_IOMMU: 1 when DMA goes through a translating IOMMU, else 0.
 * @DRM_EDU_ACCEL_PARAM_MAX_BO_SIZE: largest size BO_CREATE or BO_USERPTR accepts.
 * @DRM_EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE: largest DMA segment the device's mappings use.
 * @DRM_EDU_ACCEL_PARAM_MAX_QUEUES: queues one open file may have at once.
 * @DRM_EDU_ACCEL_PARAM_MAX_OPS: copy operations one SUBMIT may carry.
 * @DRM_EDU_ACCEL_PARAM_MAX_SYNCS: in-syncs, and out-syncs, one SUBMIT may carry.
 * @DRM_EDU_ACCEL_PARAM_MAX_JOB_BYTES: device traffic one SUBMIT may carry, H2H counted
 *	twice (it crosses the device both ways); split larger copies into several jobs.
 * @DRM_EDU_ACCEL_PARAM_PINNED_BYTES: bytes this file currently has pinned (userptr) or allocated
 *	(BO_CREATE), as charged to it. A job holds the BOs it names until the scheduler frees
 *	it, a moment after its fence signals: a BO closed right after the wait may stay
 *	charged that long.
 * @DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET: where to mmap this file's completion page
 *	(PROT_READ, MAP_SHARED, %DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE bytes): every queue's
 *	&struct drm_edu_accel_completion, and the file's &struct drm_edu_accel_file_status at
 *	%DRM_EDU_ACCEL_FILE_STATUS_OFFSET. The page is made when the file is opened and has no
 *	GEM handle, so no copy can name it and no handle number goes stale. Only this file may
 *	map it; a fork child does not inherit the mapping.
 *
 * Parameter 10 was COMPLETION_HANDLE before 3.0; it now fails with -EINVAL.
 */
enum drm_edu_accel_param {
	DRM_EDU_ACCEL_PARAM_DRIVER_VERSION = 0,
	DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS = 1,
	DRM_EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE = 2,
	DRM_EDU_ACCEL_PARAM_MAX_TRANSFER = 3,
	DRM_EDU_ACCEL_PARAM_IOMMU = 4,
	DRM_EDU_ACCEL_PARAM_MAX_BO_SIZE = 5,
	DRM_EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE = 6,
	DRM_EDU_ACCEL_PARAM_MAX_QUEUES = 7,
	DRM_EDU_ACCEL_PARAM_MAX_OPS = 8,
	DRM_EDU_ACCEL_PARAM_PINNED_BYTES = 9,
	DRM_EDU_ACCEL_PARAM_MAX_SYNCS = 11,
	DRM_EDU_ACCEL_PARAM_MAX_JOB_BYTES = 12,
	DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET = 13,
};

/**
 * struct drm_edu_accel_get_param - query one capability or limit
 * @param: in, an &enum drm_edu_accel_param; unknown values fail with -EINVAL
 * @pad: in, must be zero
 * @value: out, the value
 *
 * It reads; it creates nothing and changes nothing.
 *
 * Errors: -EINVAL (unknown @param, nonzero @pad), -ENODEV.
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
 * It is charged to the calling user's RLIMIT_MEMLOCK (unless CAP_IPC_LOCK), as BO_USERPTR is.
 * Mappings are not inherited by fork() children (VM_DONTCOPY): a child sees no mapping
 * there. MADV_DONTNEED on a mapping is harmless: the next touch maps the same page again.
 *
 * Errors: -EINVAL (@size 0 or above MAX_BO_SIZE, nonzero @flags), -ENOMEM (no memory the
 * device can reach, past RLIMIT_MEMLOCK, or past the device's share of the bounce pool: see
 * &struct drm_edu_accel_bo_userptr), -EPERM (RLIMIT_MEMLOCK is zero), -EINTR
 * (a fatal signal while allocating), -ENODEV.
 */
struct drm_edu_accel_bo_create {
	__u64 size;
	__u32 flags;
	__u32 handle;
	__u64 mmap_offset;
};

/* The device only reads this memory (it is a copy source): no FOLL_WRITE, read-only pages OK. */
#define DRM_EDU_ACCEL_BO_USERPTR_READONLY	(1u << 0)
#define DRM_EDU_ACCEL_BO_USERPTR_FLAGS	DRM_EDU_ACCEL_BO_USERPTR_READONLY

/**
 * struct drm_edu_accel_bo_userptr - pin an existing range of this process's memory for the
 * device (the cudaHostRegister analogue)
 * @user_ptr: in, start of the range; need not be page aligned
 * @size: in, bytes, 1..MAX_BO_SIZE; need not be page aligned
 * @flags: in, DRM_EDU_ACCEL_BO_USERPTR_*
 * @handle: out, GEM handle; DRM_IOCTL_GEM_CLOSE unpins once no job uses the memory
 *
 * The pages covering the range are pinned (FOLL_LONGTERM) and charged to RLIMIT_MEMLOCK
 * unless the caller has CAP_IPC_LOCK: -ENOMEM past the limit, -EPERM when the limit is zero.
 * -ENOMEM also when the mapping would bounce (no IOMMU, swiotlb=force or a confidential
 * guest) and the device's BOs already hold their share of the bounce pool (module parameter
 * max_bounce_pct, half by default): the pool serves every device's DMA. It comes back as BOs
 * are freed, once no job uses them. Imported dma-bufs count too.
 * The charge is the user's (what all of the user's processes have pinned through this driver
 * counts against the caller's limit), as io_uring's registered buffers are.
 * Under an IOMMU the device's address space is its DMA mask's (256 MiB at 28 bits), and the
 * IOMMU's lazy flush gives released registrations' addresses back some milliseconds later:
 * a registration may wait for them (at most about 200 ms) before it fails with -ENOMEM.
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
 * marked invalid (BO_INFO flag %DRM_EDU_ACCEL_BO_INFO_INVALIDATED), the file's
 * &drm_edu_accel_file_status.invalidations grows, and SUBMIT naming the BO fails with
 * -ESTALE: register the range again. Jobs queued before keep using the old pages.
 * Protection changes and fork() do not invalidate (a pinned page stays the parent's).
 * Some events keep the pinned pages where they are but reach the driver as if the range were
 * unmapped, and invalidate it too: a transparent huge page split by a partial munmap,
 * mprotect or madvise of it, and reclaim, migration or compaction trying the range (the pin
 * makes them fail). Treat -ESTALE as "register again", not as "the memory changed".
 */
struct drm_edu_accel_bo_userptr {
	__u64 user_ptr;
	__u64 size;
	__u32 flags;
	__u32 handle;
};

/* BO_INFO flags */
#define DRM_EDU_ACCEL_BO_INFO_USERPTR	(1u << 0)	/* made by BO_USERPTR */
#define DRM_EDU_ACCEL_BO_INFO_READONLY	(1u << 1)	/* the device may only read it */
/* userptr: the range was unmapped or remapped since registration; SUBMIT refuses the BO */
#define DRM_EDU_ACCEL_BO_INFO_INVALIDATED	(1u << 2)
/* imported from a dma-buf (DRM_IOCTL_PRIME_FD_TO_HANDLE): another exporter's memory */
#define DRM_EDU_ACCEL_BO_INFO_IMPORTED	(1u << 3)

/**
 * struct drm_edu_accel_bo_info - describe a BO
 * @handle: in, GEM handle of this file
 * @flags: out, DRM_EDU_ACCEL_BO_INFO_* (%DRM_EDU_ACCEL_BO_INFO_INVALIDATED for a userptr BO whose
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

/* Bytes of the completion page to map; its layout is &struct drm_edu_accel_file_status.layout. */
#define DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE	4096

/**
 * struct drm_edu_accel_completion - one queue's slot in the completion page
 * The completion page holds MAX_QUEUES (63) of these, then the file's
 * &struct drm_edu_accel_file_status at %DRM_EDU_ACCEL_FILE_STATUS_OFFSET.
 *
 * @completed: last sequence number whose job has finished (successfully or not)
 * @failed: last sequence number whose job failed, 0 if none
 * @error: negative errno of that failure (-ETIMEDOUT, -ECANCELED, -ENODEV, -ESRCH ...)
 * @pad: zero
 * @reserved: zero; keeps slots 64 bytes apart
 *
 * Memory ordering: the driver writes @failed and @error, then @completed with release
 * semantics; a reader loads @completed with acquire semantics (C11 memory_order_acquire,
 * __atomic_load_n(..., __ATOMIC_ACQUIRE)) and only then @failed and @error. One who sees
 * completed >= N and then failed < N knows job N succeeded; every byte job N wrote to a BO is
 * then visible to the CPU too. Each field is written whole (naturally aligned 64- and 32-bit
 * stores); the values only grow.
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

/* The completion page's layout: the slots and file status as this header describes them. */
#define DRM_EDU_ACCEL_COMPLETION_LAYOUT	1

/**
 * struct drm_edu_accel_file_status - the file's part of its completion page
 * @invalidations: grows each time one of the file's userptr BOs is invalidated; a cache of
 *	registrations compares it with the value it last saw (one memory read) before trusting
 *	an entry. The BO's INVALIDATED flag is set before the count grows.
 * @layout: %DRM_EDU_ACCEL_COMPLETION_LAYOUT, written before the page can be mapped; a reader
 *	that finds another value must not interpret the page
 * @pad: zero
 * @reserved: zero
 */
struct drm_edu_accel_file_status {
	__u64 invalidations;
	__u32 layout;
	__u32 pad;
	__u64 reserved[6];
};

/**
 * enum drm_edu_accel_queue_priority - which queue's ready job the engine takes next; a
 * greater value runs first
 * @DRM_EDU_ACCEL_QUEUE_PRIORITY_DEFAULT: what a zeroed struct asks for: NORMAL.
 * @DRM_EDU_ACCEL_QUEUE_PRIORITY_LOW: runs when no normal or high queue has a ready job.
 * @DRM_EDU_ACCEL_QUEUE_PRIORITY_NORMAL: normal.
 * @DRM_EDU_ACCEL_QUEUE_PRIORITY_HIGH: ahead of normal and low queues, of every file; needs
 *	CAP_SYS_NICE.
 *
 * Priority orders jobs that are ready (in-syncs signalled) and not yet on the engine; the
 * engine never preempts a running job and holds at most one more behind it, so a HIGH job
 * waits for at most two jobs already handed over. Queues of equal priority take turns.
 */
enum drm_edu_accel_queue_priority {
	DRM_EDU_ACCEL_QUEUE_PRIORITY_DEFAULT = 0,
	DRM_EDU_ACCEL_QUEUE_PRIORITY_LOW = 1,
	DRM_EDU_ACCEL_QUEUE_PRIORITY_NORMAL = 2,
	DRM_EDU_ACCEL_QUEUE_PRIORITY_HIGH = 3,
};

/**
 * struct drm_edu_accel_queue_create - create a queue (a stream): jobs run in submission order
 * @flags: in, must be zero
 * @priority: in, an &enum drm_edu_accel_queue_priority
 * @queue: out, queue id, valid in this file only
 * @completion_offset: out, byte offset of this queue's &struct drm_edu_accel_completion in
 *	the file's completion page (%DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET)
 * @reserved: in, must be zero
 *
 * A queue's id and slot are not handed to a new queue before every job of the old one has
 * ended (QUEUE_DESTROY does not wait for that).
 *
 * Errors: -EINVAL (nonzero @flags or @reserved, unknown @priority), -EACCES (HIGH
 * priority without CAP_SYS_NICE), -ENOSPC (MAX_QUEUES queues, counting destroyed ones whose
 * jobs still run), -ENOMEM, -ENODEV.
 */
struct drm_edu_accel_queue_create {
	__u32 flags;
	__u32 priority;
	__u32 queue;
	__u32 completion_offset;
	__u64 reserved[3];
};

/**
 * struct drm_edu_accel_queue_destroy - destroy a queue; jobs already submitted still run
 * @queue: in, queue id
 * @pad: in, must be zero
 *
 * It may sleep until the queue's jobs have reached the engine (not until they end), without
 * holding up the device's removal.
 *
 * Errors: -EINVAL (nonzero @pad), -ENOENT (no such queue, or already destroyed). It works
 * after the device is gone too (its jobs have then ended with -ENODEV).
 */
struct drm_edu_accel_queue_destroy {
	__u32 queue;
	__u32 pad;
};

/**
 * enum drm_edu_accel_op_type - what one copy operation does
 * @DRM_EDU_ACCEL_OP_H2D: BO range -> device buffer; @dst_handle must be 0, @dst_offset is a
 *	device buffer offset and @dst_offset + @size <= MAX_TRANSFER
 * @DRM_EDU_ACCEL_OP_D2H: device buffer -> BO range; @src_handle must be 0, likewise for @src_offset
 * @DRM_EDU_ACCEL_OP_H2H: BO range -> BO range of any size, staged through the device buffer
 *	front to back, a chunk at a time. Overlapping ranges of one BO, or of two userptr BOs
 *	of the same memory, copy as memmove() when the destination starts at or before the
 *	source; one that starts inside the source, after it, is refused (-EINVAL): it would
 *	overwrite source bytes before they are read.
 */
enum drm_edu_accel_op_type {
	DRM_EDU_ACCEL_OP_H2D = 1,
	DRM_EDU_ACCEL_OP_D2H = 2,
	DRM_EDU_ACCEL_OP_H2H = 3,
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

/* The sync is a point on a timeline syncobj (else the syncobj's one fence). */
#define DRM_EDU_ACCEL_SYNC_TIMELINE	(1u << 0)
#define DRM_EDU_ACCEL_SYNC_FLAGS	DRM_EDU_ACCEL_SYNC_TIMELINE

/**
 * struct drm_edu_accel_sync - a DRM syncobj's fence, or a point on its timeline
 * @handle: syncobj handle of this file
 * @flags: 0 (binary: an in-sync waits for the syncobj's fence, an out-sync replaces it) or
 *	%DRM_EDU_ACCEL_SYNC_TIMELINE (an in-sync waits for @point, an out-sync adds @point)
 * @point: the timeline point, at least 1 with %DRM_EDU_ACCEL_SYNC_TIMELINE; 0 without it
 *
 * A @point that does not match @flags fails with -EINVAL, so that a zero point can never
 * silently turn a timeline wait into a wait for whatever fence the syncobj holds.
 */
struct drm_edu_accel_sync {
	__u32 handle;
	__u32 flags;
	__u64 point;
};

/**
 * struct drm_edu_accel_obj_array - an array of structs in user memory that says how far apart
 * its elements are, so that the element struct can grow
 * @stride: in, bytes from one element to the next: at least the element's size in interface
 *	2.0 (&struct drm_edu_accel_copy_op: 40, &struct drm_edu_accel_sync: 16), at most 4096.
 *	A caller built against a newer header may pass a larger element: the bytes this driver
 *	does not know must be zero (else -E2BIG); a caller built against an older one a smaller
 *	element: the fields it lacks read as zero.
 * @count: in, number of elements
 * @array: in, pointer to the first element; not read when @count is 0
 */
struct drm_edu_accel_obj_array {
	__u32 stride;
	__u32 count;
	__u64 array;
};

/* Fills a &struct drm_edu_accel_obj_array for an array of n elements of its own type. */
#define DRM_EDU_ACCEL_OBJ_ARRAY(n, ptr) \
	{ .stride = sizeof((ptr)[0]), .count = (n), .array = (__u64)(__UINTPTR_TYPE__)(ptr) }

/**
 * struct drm_edu_accel_submit - queue one job: its copies run in order, after every in-sync
 * has signalled and after the previous job of the same queue
 * @queue: in, queue id
 * @flags: in, must be zero
 * @ops: in, the job's &struct drm_edu_accel_copy_op, 1..MAX_OPS of them
 * @in_syncs: in, &struct drm_edu_accel_sync that must signal before the job runs,
 *	0..MAX_SYNCS of them
 * @out_syncs: in, &struct drm_edu_accel_sync signalled when the job ends (timeline points
 *	are added; binary syncobjs have their fence replaced), 0..MAX_SYNCS of them
 * @seqno: out, the job's sequence number on its queue (1, 2, 3 ...); the queue's completion
 *	slot reaches it when the job has ended
 * @extensions: in, must be 0: room for a chain of extension structs (a pointer to the first,
 *	each naming its type and the next) should SUBMIT need more than growing at its end
 *
 * Everything is validated before anything is queued: ranges against their BOs (and the
 * device buffer), write access to destinations, handles, syncobjs. The job holds a reference
 * on every BO it names until it ends, so closing handles or the file cannot free memory the
 * device still uses.
 *
 * A job whose in-sync fence failed does not run: it ends with -ECANCELED. A job's error
 * (-ETIMEDOUT when the device stopped answering, -ECANCELED, -ENODEV after removal or once
 * the device is wedged by a transfer that never ended) is in
 * its queue's completion slot and on its out-sync fences (sync_file status, syncobj
 * queries). Jobs one file has submitted and not yet retired are bounded (module parameter
 * max_jobs_per_file, default 256), and one job carries at most MAX_JOB_BYTES of device
 * traffic (module parameter max_job_mib, default 16 MiB, H2H counted twice) so that no job
 * holds the one engine for long: split larger copies into several jobs. A job's ranges
 * belong to the device until it ends (see "CPU ownership" at the top).
 *
 * Errors: -EINVAL (nonzero @flags/@extensions/op flags, unknown sync flags or a point that
 * does not match them, no op or more than MAX_OPS, more than
 * MAX_SYNCS in- or out-syncs, a stride below the 2.0 element size or above 4096, unknown op
 * type, a handle where none belongs, a range
 * outside its BO or past MAX_TRANSFER on the device side, size 0, an H2H op whose
 * destination starts inside its source after the source's start: see %DRM_EDU_ACCEL_OP_H2H),
 * -ENOENT (unknown queue,
 * BO handle or syncobj of this file), -EACCES (a write into a READONLY registration),
 * -ESTALE (an invalidated userptr BO), -EFAULT (an
 * unreadable array), -E2BIG (nonzero bytes past the known part of an element), -EMSGSIZE
 * (more than MAX_JOB_BYTES of device traffic), -EBUSY (max_jobs_per_file reached),
 * -ENOMEM, -ENODEV.
 */
struct drm_edu_accel_submit {
	__u32 queue;
	__u32 flags;
	struct drm_edu_accel_obj_array ops;
	struct drm_edu_accel_obj_array in_syncs;
	struct drm_edu_accel_obj_array out_syncs;
	__u64 seqno;
	__u64 extensions;
};

/**
 * DOC: sharing BOs (PRIME)
 *
 * DRM_IOCTL_PRIME_HANDLE_TO_FD exports a BO_CREATE or userptr BO as a dma-buf; other
 * devices and drivers import it, each DMA-mapping the pages for itself. The dma-buf keeps the
 * pages pinned after the handle, the file and the device are gone. A userptr export covers
 * whole pages (BO_USERPTR's @offset bytes come first). BO_CREATE memory can be mapped
 * through the dma-buf's fd (MAP_SHARED); userptr memory cannot (it is the process's already).
 * Refused: a READONLY registration, which an importer could write (-EACCES), an invalidated
 * one (-ESTALE). A userptr BO invalidated after its export keeps its old pages for the
 * importers.
 *
 * DRM_IOCTL_PRIME_FD_TO_HANDLE imports any dma-buf as a BO (BO_INFO flag
 * %DRM_EDU_ACCEL_BO_INFO_IMPORTED) that copies may name like any other; its own export on the
 * same device gives back the exported BO. -ERANGE: the exporter mapped a page this device
 * cannot reach, or the device has no IOMMU and no bounce buffers and a mask narrower than
 * memory (it imports nothing then: the mapping itself would fail). -EINVAL: not a dma-buf,
 * or larger than 1 GiB. An import pins nothing of the importer's RLIMIT_MEMLOCK.
 *
 * Implicit sync: a job naming a BO that is exported or imported at SUBMIT waits for the
 * fences on the BO's reservation object (another driver's work; a writer waits for every
 * earlier user, a reader for earlier writers) and leaves its own fence there, so that other
 * drivers' work orders with ours without syncobjs. Private BOs carry no fences.
 */

/* BO_WAIT flags */
#define DRM_EDU_ACCEL_BO_WAIT_READERS	(1u << 0)	/* also wait for readers */

/**
 * struct drm_edu_accel_bo_wait - wait for the work on a BO's reservation object
 * @handle: in, GEM handle of this file
 * @flags: in, 0 waits for the work that writes the BO (before the CPU reads it);
 *	%DRM_EDU_ACCEL_BO_WAIT_READERS for readers too (before the CPU writes it)
 * @timeout_ns: in, absolute CLOCK_MONOTONIC deadline in nanoseconds; 0 only polls
 *
 * Only shared BOs carry fences (see "sharing BOs"): on a private BO it returns 0 at once;
 * wait for a queue's work with its syncobjs.
 *
 * Errors: -ETIME (the deadline passed first), -EINVAL (unknown flag), -ENOENT (unknown
 * handle), -ERESTARTSYS (a signal). After the device is gone it still waits: its jobs' fences
 * have signalled with -ENODEV, other drivers' may still be pending.
 */
struct drm_edu_accel_bo_wait {
	__u32 handle;
	__u32 flags;
	__s64 timeout_ns;
};

#if defined(__cplusplus)
}
#endif

#endif /* _UAPI_EDU_ACCEL_H_ */
