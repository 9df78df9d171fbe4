/* SPDX-License-Identifier: GPL-2.0 */
#ifndef EDU_ACCEL_DRV_H
#define EDU_ACCEL_DRV_H

#include <drm/drm_device.h>
#include <linux/completion.h>
#include <linux/mutex.h>
#include <linux/pci.h>

#define EDU_ACCEL_NAME		"edu_accel"

/**
 * struct edu_accel_device - one bound edu PCI function
 * @drm: the DRM device; its lifetime (drmm) bounds everything below
 * @pdev: the PCI function
 * @regs: BAR0
 * @dma_bits: width of the DMA mask, equal to the edu device's dma_mask property
 * @irq_is_msi: whether MSI was granted (else INTx, shared)
 * @dma_lock: serialises users of the DMA engine
 * @dma_done: completed by the IRQ handler when a DMA ends
 * @dma_count: transfers completed since probe
 * @irq_count: interrupts handled since probe
 */
struct edu_accel_device {
	struct drm_device drm;
	struct pci_dev *pdev;
	void __iomem *regs;
	unsigned int dma_bits;
	bool irq_is_msi;
	struct mutex dma_lock;
	struct completion dma_done;
	atomic64_t dma_count;
	atomic64_t irq_count;
};

static inline struct edu_accel_device *to_edu(struct drm_device *drm)
{
	return container_of(drm, struct edu_accel_device, drm);
}

void edu_accel_debugfs_init(struct drm_minor *minor);

#endif /* EDU_ACCEL_DRV_H */
