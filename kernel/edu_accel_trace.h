/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoints of the whole DMA path, beside drm_sched's own (gpu_scheduler:*) and
 * dma_fence:*. Every event carries the client: one per open file, the id debugfs "clients"
 * and "bos" print, so events of two processes can be told apart.
 *
 * A buffer:  edu_bo_pin -> edu_bo_map ... (edu_bo_invalidate) ... edu_bo_unmap -> edu_bo_unpin
 * A job:     edu_job_queued -> edu_job_run -> edu_job_start -> edu_job_sync (to the device)
 *            -> [edu_scrub] -> edu_xfer_start / edu_xfer_done ... -> edu_job_sync (to the CPU)
 *            -> edu_job_done; edu_job_timeout on each timeout period
 *
 * e.g. echo 1 > /sys/kernel/tracing/events/edu_accel/enable; cat /sys/kernel/tracing/trace
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM edu_accel

#if !defined(EDU_ACCEL_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define EDU_ACCEL_TRACE_H

#include <linux/tracepoint.h>
#include <linux/types.h>

/* Pages of a BO: pinned from user memory (user_ptr != 0) or allocated by the driver. */
TRACE_EVENT(edu_bo_pin,
	TP_PROTO(u64 client, u64 user_ptr, unsigned long npages, bool write, int ret),
	TP_ARGS(client, user_ptr, npages, write, ret),
	TP_STRUCT__entry(__field(u64, client) __field(u64, user_ptr) __field(unsigned long, npages)
			 __field(bool, write) __field(int, ret)),
	TP_fast_assign(__entry->client = client; __entry->user_ptr = user_ptr;
		       __entry->npages = npages; __entry->write = write; __entry->ret = ret;),
	TP_printk("client=%llu user=0x%llx pages=%lu %s ret=%d", __entry->client, __entry->user_ptr,
		  __entry->npages, !__entry->user_ptr ? "allocated" :
		  __entry->write ? "FOLL_WRITE|FOLL_LONGTERM" : "FOLL_LONGTERM",
		  __entry->ret)
);

/* The SG table (sg entries: runs of contiguous pages) and its DMA mapping (dma entries). */
TRACE_EVENT(edu_bo_map,
	TP_PROTO(u64 client, u64 user_ptr, u64 size, u32 sg_ents, u32 dma_ents, dma_addr_t first,
		 u32 first_len, int ret),
	TP_ARGS(client, user_ptr, size, sg_ents, dma_ents, first, first_len, ret),
	TP_STRUCT__entry(__field(u64, client) __field(u64, user_ptr) __field(u64, size)
			 __field(u32, sg_ents) __field(u32, dma_ents) __field(u64, first)
			 __field(u32, first_len) __field(int, ret)),
	TP_fast_assign(__entry->client = client; __entry->user_ptr = user_ptr; __entry->size = size;
		       __entry->sg_ents = sg_ents; __entry->dma_ents = dma_ents;
		       __entry->first = first; __entry->first_len = first_len; __entry->ret = ret;),
	TP_printk("client=%llu user=0x%llx size=%llu sg=%u dma=%u first=0x%llx+%u ret=%d",
		  __entry->client, __entry->user_ptr, __entry->size, __entry->sg_ents,
		  __entry->dma_ents, __entry->first, __entry->first_len, __entry->ret)
);

DECLARE_EVENT_CLASS(edu_bo_release,
	TP_PROTO(u64 client, u64 user_ptr, unsigned long count),
	TP_ARGS(client, user_ptr, count),
	TP_STRUCT__entry(__field(u64, client) __field(u64, user_ptr) __field(unsigned long, count)),
	TP_fast_assign(__entry->client = client; __entry->user_ptr = user_ptr;
		       __entry->count = count;),
	TP_printk("client=%llu user=0x%llx count=%lu", __entry->client, __entry->user_ptr,
		  __entry->count)
);
/* count: DMA entries unmapped */
DEFINE_EVENT(edu_bo_release, edu_bo_unmap,
	TP_PROTO(u64 client, u64 user_ptr, unsigned long count), TP_ARGS(client, user_ptr, count));
/* count: pages unpinned (user memory) or freed (driver memory) */
DEFINE_EVENT(edu_bo_release, edu_bo_unpin,
	TP_PROTO(u64 client, u64 user_ptr, unsigned long count), TP_ARGS(client, user_ptr, count));

/* The range under a pinned userptr BO changed: the BO is marked invalidated. */
TRACE_EVENT(edu_bo_invalidate,
	TP_PROTO(u64 client, u64 user_ptr, unsigned long start, unsigned long end, int event),
	TP_ARGS(client, user_ptr, start, end, event),
	TP_STRUCT__entry(__field(u64, client) __field(u64, user_ptr) __field(unsigned long, start)
			 __field(unsigned long, end) __field(int, event)),
	TP_fast_assign(__entry->client = client; __entry->user_ptr = user_ptr;
		       __entry->start = start; __entry->end = end; __entry->event = event;),
	TP_printk("client=%llu user=0x%llx range=[0x%lx, 0x%lx) mmu_notifier_event=%d",
		  __entry->client, __entry->user_ptr, __entry->start, __entry->end, __entry->event)
);

/* A job entered its queue (SUBMIT): its scheduler fence is what syncobjs get. */
TRACE_EVENT(edu_job_queued,
	TP_PROTO(u64 client, u32 queue, u64 seqno, u32 nops, u32 nin, u64 fence_ctx, u64 fence_seqno),
	TP_ARGS(client, queue, seqno, nops, nin, fence_ctx, fence_seqno),
	TP_STRUCT__entry(__field(u64, client) __field(u32, queue) __field(u64, seqno)
			 __field(u32, nops) __field(u32, nin) __field(u64, fence_ctx)
			 __field(u64, fence_seqno)),
	TP_fast_assign(__entry->client = client; __entry->queue = queue; __entry->seqno = seqno;
		       __entry->nops = nops; __entry->nin = nin; __entry->fence_ctx = fence_ctx;
		       __entry->fence_seqno = fence_seqno;),
	TP_printk("client=%llu queue=%u seqno=%llu ops=%u in_syncs=%u finished_fence=%llu:%llu",
		  __entry->client, __entry->queue, __entry->seqno, __entry->nops, __entry->nin,
		  __entry->fence_ctx, __entry->fence_seqno)
);

DECLARE_EVENT_CLASS(edu_job_fence,
	TP_PROTO(u64 client, u32 queue, u64 seqno, u64 fence_ctx, u64 fence_seqno, int error),
	TP_ARGS(client, queue, seqno, fence_ctx, fence_seqno, error),
	TP_STRUCT__entry(__field(u64, client) __field(u32, queue) __field(u64, seqno)
			 __field(u64, fence_ctx) __field(u64, fence_seqno) __field(int, error)),
	TP_fast_assign(__entry->client = client; __entry->queue = queue; __entry->seqno = seqno;
		       __entry->fence_ctx = fence_ctx; __entry->fence_seqno = fence_seqno;
		       __entry->error = error;),
	TP_printk("client=%llu queue=%u seqno=%llu hw_fence=%llu:%llu error=%d", __entry->client,
		  __entry->queue, __entry->seqno, __entry->fence_ctx, __entry->fence_seqno,
		  __entry->error)
);
/* The scheduler handed the job to the engine (run_job): its hardware fence is made. */
DEFINE_EVENT(edu_job_fence, edu_job_run,
	TP_PROTO(u64 client, u32 queue, u64 seqno, u64 fence_ctx, u64 fence_seqno, int error),
	TP_ARGS(client, queue, seqno, fence_ctx, fence_seqno, error));
/* The job reached the engine's head: its ranges pass to the device. */
DEFINE_EVENT(edu_job_fence, edu_job_start,
	TP_PROTO(u64 client, u32 queue, u64 seqno, u64 fence_ctx, u64 fence_seqno, int error),
	TP_ARGS(client, queue, seqno, fence_ctx, fence_seqno, error));
/* The job ended: completion slot written, hardware fence signalled. */
DEFINE_EVENT(edu_job_fence, edu_job_done,
	TP_PROTO(u64 client, u32 queue, u64 seqno, u64 fence_ctx, u64 fence_seqno, int error),
	TP_ARGS(client, queue, seqno, fence_ctx, fence_seqno, error));

/* Ownership of a job's ranges moved: to the device at its start, to the CPU at its end. */
TRACE_EVENT(edu_job_sync,
	TP_PROTO(u64 client, u32 queue, u64 seqno, bool for_device, u32 ranges, u64 bytes),
	TP_ARGS(client, queue, seqno, for_device, ranges, bytes),
	TP_STRUCT__entry(__field(u64, client) __field(u32, queue) __field(u64, seqno)
			 __field(bool, for_device) __field(u32, ranges) __field(u64, bytes)),
	TP_fast_assign(__entry->client = client; __entry->queue = queue; __entry->seqno = seqno;
		       __entry->for_device = for_device; __entry->ranges = ranges;
		       __entry->bytes = bytes;),
	TP_printk("client=%llu queue=%u seqno=%llu for=%s ranges=%u bytes=%llu", __entry->client,
		  __entry->queue, __entry->seqno, __entry->for_device ? "device" : "cpu",
		  __entry->ranges, __entry->bytes)
);

/* The device buffer is cleared before a job of another client than its last user's. */
TRACE_EVENT(edu_scrub,
	TP_PROTO(u64 from_client, u64 to_client),
	TP_ARGS(from_client, to_client),
	TP_STRUCT__entry(__field(u64, from_client) __field(u64, to_client)),
	TP_fast_assign(__entry->from_client = from_client; __entry->to_client = to_client;),
	TP_printk("from_client=%llu to_client=%llu", __entry->from_client, __entry->to_client)
);

TRACE_EVENT(edu_xfer_start,
	TP_PROTO(u64 client, u32 queue, u64 seqno, dma_addr_t ram, u32 dev_off, u32 len, bool to_ram),
	TP_ARGS(client, queue, seqno, ram, dev_off, len, to_ram),
	TP_STRUCT__entry(__field(u64, client) __field(u32, queue) __field(u64, seqno)
			 __field(u64, ram) __field(u32, dev_off) __field(u32, len)
			 __field(bool, to_ram)),
	TP_fast_assign(__entry->client = client; __entry->queue = queue; __entry->seqno = seqno;
		       __entry->ram = ram; __entry->dev_off = dev_off; __entry->len = len;
		       __entry->to_ram = to_ram;),
	TP_printk("client=%llu queue=%u seqno=%llu %s ram=0x%llx dev=0x%x len=%u", __entry->client,
		  __entry->queue, __entry->seqno, __entry->to_ram ? "dev->ram" : "ram->dev",
		  __entry->ram, __entry->dev_off, __entry->len)
);

TRACE_EVENT(edu_xfer_done,
	TP_PROTO(u64 client, u32 queue, u64 seqno),
	TP_ARGS(client, queue, seqno),
	TP_STRUCT__entry(__field(u64, client) __field(u32, queue) __field(u64, seqno)),
	TP_fast_assign(__entry->client = client; __entry->queue = queue; __entry->seqno = seqno;),
	TP_printk("client=%llu queue=%u seqno=%llu", __entry->client, __entry->queue,
		  __entry->seqno)
);

/* A timeout period of the job at the engine's head ended; error: how it was failed, or 0. */
TRACE_EVENT(edu_job_timeout,
	TP_PROTO(u64 client, u32 queue, u64 seqno, u32 stuck_periods, int error),
	TP_ARGS(client, queue, seqno, stuck_periods, error),
	TP_STRUCT__entry(__field(u64, client) __field(u32, queue) __field(u64, seqno)
			 __field(u32, stuck_periods) __field(int, error)),
	TP_fast_assign(__entry->client = client; __entry->queue = queue; __entry->seqno = seqno;
		       __entry->stuck_periods = stuck_periods; __entry->error = error;),
	TP_printk("client=%llu queue=%u seqno=%llu stuck_periods=%u failed=%d", __entry->client,
		  __entry->queue, __entry->seqno, __entry->stuck_periods, __entry->error)
);

#endif /* EDU_ACCEL_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE edu_accel_trace
#include <trace/define_trace.h>
