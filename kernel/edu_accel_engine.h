/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The engine: the state machine over edu's one DMA channel (edu_accel_engine.c). It owns the
 * device's interrupt; the scheduler backend hands it jobs, and edu_accel_hw.c programs and
 * reads the registers for it.
 */
#ifndef EDU_ACCEL_ENGINE_H
#define EDU_ACCEL_ENGINE_H

#include <linux/atomic.h>
#include <linux/completion.h>
#include <linux/ktime.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/wait.h>

struct dma_fence;
struct edu_accel_device;
struct edu_job;

/**
 * struct edu_xfer - one edu DMA transfer
 * @ram: DMA address on the host side
 * @dev_off: offset in the device buffer
 * @len: bytes, 1..EDU_MAX_XFER
 * @to_ram: direction device -> host
 */
struct edu_xfer {
	dma_addr_t ram;
	u32 dev_off;
	u32 len;
	bool to_ram;
};

/**
 * struct edu_engine - the IRQ-driven state machine over edu's one DMA channel
 * @lock: protects everything below but @advance_lock; also the lock of every hardware fence
 * @jobs: jobs handed over by the scheduler, in order; the first one is running
 * @done: jobs whose last transfer ended (or that failed), in order, waiting for the
 *	interrupt thread to give their ranges back to the CPU and signal their fences
 * @advance_lock: held by whoever completes or starts jobs in process context (the interrupt
 *	thread, run_job, the timeout handler, teardown): completions stay in order, and a job's
 *	start runs unlocked without another taking the engine meanwhile
 * @starting: a job at the head is being started (its ranges handed to the device) with
 *	@lock dropped: nothing else may program the engine
 * @busy: a transfer is programmed and its interrupt not yet seen
 * @inflight: bytes of that transfer
 * @scrubbing: that transfer clears the device buffer for @scrub_for
 * @scrub_for: client id the device buffer is being cleared for
 * @owner: client id whose bytes the device buffer holds (0: nobody's, or unknown); a job of
 *	another client first has the buffer cleared, so no file ever reads another's bytes
 * @lost: the device stopped answering (all-ones reads) or was wedged: no register is touched
 *	again, and every job fails with -ENODEV until the driver binds again
 * @wedged: a transfer never ended: bus mastering was taken away and the device declared lost
 * @zero: a zeroed page the device reads to clear its buffer
 * @zero_dma: its DMA address
 * @reserved: the self test owns the DMA channel: no job starts
 * @kxfer: the transfer in flight is the reserver's (edu_engine_run_xfer()), not a job's
 * @kxfer_done: completed when that transfer ended
 * @fence_ctx: dma_fence context of the hardware fences
 * @fence_seqno: last hardware fence seqno
 * @idle: woken when @jobs empties
 * @xfers: transfers completed
 * @bytes: bytes moved by them
 * @jobs_done: jobs completed successfully
 * @jobs_failed: jobs completed with an error
 * @scrubs: device buffer clears between clients
 * @busy_ns: time with a transfer in flight
 * @busy_since: when the current busy period began
 * @drop_irqs: fault injection: DMA interrupts to ignore (debugfs)
 */
struct edu_engine {
	spinlock_t lock;
	struct list_head jobs;
	struct list_head done;
	struct mutex advance_lock;
	bool starting;
	bool busy;
	u32 inflight;
	bool scrubbing;
	u64 scrub_for;
	u64 owner;
	bool lost;
	bool wedged;
	void *zero;
	dma_addr_t zero_dma;
	bool reserved;
	bool kxfer;
	struct completion kxfer_done;
	u64 fence_ctx;
	u64 fence_seqno;
	wait_queue_head_t idle;
	u64 xfers;
	u64 bytes;
	u64 jobs_done;
	u64 jobs_failed;
	u64 scrubs;
	u64 busy_ns;
	ktime_t busy_since;
	atomic_t drop_irqs;
};

int edu_engine_init(struct edu_accel_device *edev);
void edu_engine_fini(struct edu_accel_device *edev);
void edu_engine_stop(struct edu_accel_device *edev);
void edu_engine_halt(struct edu_accel_device *edev);
struct dma_fence *edu_engine_push(struct edu_accel_device *edev, struct edu_job *job);
int edu_engine_request_irq(struct edu_accel_device *edev, unsigned int irq, unsigned long flags);
bool edu_engine_timeout(struct edu_accel_device *edev, struct edu_job *job);
int edu_engine_reserve(struct edu_accel_device *edev);
void edu_engine_unreserve(struct edu_accel_device *edev);
int edu_engine_run_xfer(struct edu_accel_device *edev, const struct edu_xfer *x);

#endif /* EDU_ACCEL_ENGINE_H */
