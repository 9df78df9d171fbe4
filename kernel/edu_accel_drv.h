/* SPDX-License-Identifier: GPL-2.0 */
#ifndef EDU_ACCEL_DRV_H
#define EDU_ACCEL_DRV_H

#include <drm/drm_device.h>
#include <drm/gpu_scheduler.h>
#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/llist.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "edu_accel_engine.h"
#include "edu_accel_job.h"

#define EDU_ACCEL_NAME		"edu_accel"

/**
 * struct edu_accel_device - one bound edu PCI function
 * @drm: the DRM device; its lifetime (drmm) bounds everything below
 * @pdev: the PCI function
 * @regs: BAR0
 * @dma_bits: width of the DMA mask, equal to the edu device's dma_mask property
 * @iommu: DMA goes through a translating IOMMU (else dma-direct: bus address == physical)
 * @irq_is_msi: whether MSI was granted (else INTx, shared)
 * @dma_count: transfers completed since probe
 * @irq_count: interrupts handled since probe
 * @obj_lock: protects @bos and @clients
 * @bos: every live BO, for debugfs
 * @clients: accounting of every client with an open file or a live BO
 * @pinned_bytes: bytes pinned by all BOs of this device
 * @bounced_bytes: swiotlb bounce slots the mappings of this device's BOs hold
 * @bounce_limit: what @bounced_bytes may reach (a share of the bounce pool, which every
 *	device's streaming DMA shares); U64_MAX where mappings do not bounce or are not counted
 * @next_client_id: numbering of clients in debugfs
 * @write_maps_lock: serialises changes of @write_maps
 * @write_maps: device-writable DMA mappings starting on each page, by pfn
 *	(edu_accel_overlap.c)
 * @import_lock: serialises PRIME imports, so that @importer names the importing file
 * @importer: the client of the file inside DRM_IOCTL_PRIME_FD_TO_HANDLE (DRM's import hook is
 *	not told the file); NULL outside it
 * @engine: the DMA engine's state machine
 * @sched: the scheduler feeding it; each queue is an entity on it
 * @jobs_alive: jobs handed to the scheduler and not yet released; teardown waits for zero
 *	before drm_sched_fini(), which on 6.1 would leak them with their pins
 * @jobs_freed: woken when @jobs_alive reaches zero
 * @free_jobs: finished jobs waiting for @free_work
 * @free_work: drops finished jobs' BOs (the last reference unpins and unmaps, possibly a
 *	gigabyte) away from the scheduler thread, which also runs run_job
 * @submit_delay_ms: fault injection (debugfs): SUBMIT sleeps this long after handing its job
 *	to the scheduler, so that the job can end and be freed before SUBMIT returns
 * @pin_delay_ms: fault injection (debugfs): BO_USERPTR sleeps this long between its VMA
 *	check and the pin, so that a test can map a file into a hole of the range meanwhile
 * @fault_selftest_stray_irq: fault injection (debugfs): the self test raises a DMA interrupt
 *	right after programming each transfer, long before the transfer ends
 * @fault_stuck_dma: fault injection (debugfs): the device reports its DMA transfer running
 *	forever (start bit set, its interrupt ignored): tests the wedge path
 */
struct edu_accel_device {
	struct drm_device drm;
	struct pci_dev *pdev;
	void __iomem *regs;
	unsigned int dma_bits;
	bool iommu;
	bool irq_is_msi;
	atomic64_t dma_count;
	atomic64_t irq_count;
	struct mutex obj_lock;
	struct list_head bos;
	struct list_head clients;
	atomic64_t pinned_bytes;
	atomic64_t bounced_bytes;
	u64 bounce_limit;
	atomic64_t next_client_id;
	struct mutex write_maps_lock;
	struct xarray write_maps;
	struct mutex import_lock;
	struct edu_client *importer;
	struct edu_engine engine;
	struct drm_gpu_scheduler sched;
	atomic_t jobs_alive;
	wait_queue_head_t jobs_freed;
	struct llist_head free_jobs;
	struct work_struct free_work;
	u32 submit_delay_ms;
	u32 pin_delay_ms;
	bool fault_stuck_dma;
	bool fault_selftest_stray_irq;
};

/**
 * struct edu_client - what one open file has pinned; outlives the file while its BOs live
 * @ref: held by the file and by each BO it created
 * @edev: the device
 * @link: entry in &edu_accel_device.clients
 * @id: number shown in debugfs
 * @tgid: process that opened the file
 * @comm: its name at open time
 * @pinned_bytes: bytes of its live BOs
 * @engine_ns: time its jobs held the engine, from their start at its head to their last
 *	transfer's end (fdinfo's drm-engine-dma)
 * @transfers: edu DMA transfers its jobs completed (fdinfo's edu_accel-transfers)
 */
struct edu_client {
	struct kref ref;
	struct edu_accel_device *edev;
	struct list_head link;
	u64 id;
	pid_t tgid;
	char comm[TASK_COMM_LEN];
	atomic64_t pinned_bytes;
	atomic64_t engine_ns;
	atomic64_t transfers;
};

static inline struct edu_accel_device *to_edu(struct drm_device *drm)
{
	return container_of(drm, struct edu_accel_device, drm);
}

/* [addr, addr + len) lies below the device's DMA mask (edu truncates, never rejects). */
static inline bool edu_range_reachable(struct edu_accel_device *edev, dma_addr_t addr, u64 len)
{
	u64 last = addr + len - 1;

	return last >= addr && last <= DMA_BIT_MASK(edev->dma_bits);
}

void edu_client_put(struct edu_client *client);
void edu_accel_debugfs_init(struct drm_minor *minor);

/* Module parameter test_mode: the debugfs fault knobs exist. */
extern bool edu_test_mode;

/*
 * Functions the fault-injection stress test makes fail through fail_function: only in a module
 * built with EDU_FAULT_INJECTION=y (the debug kernel's), so a production module offers no
 * way to fail them from outside.
 */
#ifdef EDU_ACCEL_FAULT_INJECTION
#define EDU_ALLOW_ERROR_INJECTION(fname, type)	ALLOW_ERROR_INJECTION(fname, type)
#else
#define EDU_ALLOW_ERROR_INJECTION(fname, type)
#endif

#endif /* EDU_ACCEL_DRV_H */
