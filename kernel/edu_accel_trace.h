/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Tracepoints of the job path, beside drm_sched's own (gpu_scheduler:*):
 *   edu_accel:edu_submit -> edu_xfer_start / edu_xfer_done ... -> edu_job_done
 * e.g. echo 1 > /sys/kernel/tracing/events/edu_accel/enable
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM edu_accel

#if !defined(EDU_ACCEL_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define EDU_ACCEL_TRACE_H

#include <linux/tracepoint.h>
#include <linux/types.h>

TRACE_EVENT(edu_submit,
	TP_PROTO(u32 queue, u64 seqno, u32 nops),
	TP_ARGS(queue, seqno, nops),
	TP_STRUCT__entry(__field(u32, queue) __field(u64, seqno) __field(u32, nops)),
	TP_fast_assign(__entry->queue = queue; __entry->seqno = seqno; __entry->nops = nops;),
	TP_printk("queue=%u seqno=%llu ops=%u", __entry->queue, __entry->seqno, __entry->nops)
);

TRACE_EVENT(edu_xfer_start,
	TP_PROTO(u32 queue, u64 seqno, dma_addr_t ram, u32 dev_off, u32 len, bool to_ram),
	TP_ARGS(queue, seqno, ram, dev_off, len, to_ram),
	TP_STRUCT__entry(__field(u32, queue) __field(u64, seqno) __field(u64, ram)
			 __field(u32, dev_off) __field(u32, len) __field(bool, to_ram)),
	TP_fast_assign(__entry->queue = queue; __entry->seqno = seqno; __entry->ram = ram;
		       __entry->dev_off = dev_off; __entry->len = len; __entry->to_ram = to_ram;),
	TP_printk("queue=%u seqno=%llu %s ram=0x%llx dev=0x%x len=%u", __entry->queue,
		  __entry->seqno, __entry->to_ram ? "dev->ram" : "ram->dev", __entry->ram,
		  __entry->dev_off, __entry->len)
);

TRACE_EVENT(edu_xfer_done,
	TP_PROTO(u32 queue, u64 seqno),
	TP_ARGS(queue, seqno),
	TP_STRUCT__entry(__field(u32, queue) __field(u64, seqno)),
	TP_fast_assign(__entry->queue = queue; __entry->seqno = seqno;),
	TP_printk("queue=%u seqno=%llu", __entry->queue, __entry->seqno)
);

TRACE_EVENT(edu_job_done,
	TP_PROTO(u32 queue, u64 seqno, int error),
	TP_ARGS(queue, seqno, error),
	TP_STRUCT__entry(__field(u32, queue) __field(u64, seqno) __field(int, error)),
	TP_fast_assign(__entry->queue = queue; __entry->seqno = seqno; __entry->error = error;),
	TP_printk("queue=%u seqno=%llu error=%d", __entry->queue, __entry->seqno, __entry->error)
);

#endif /* EDU_ACCEL_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE edu_accel_trace
#include <trace/define_trace.h>
