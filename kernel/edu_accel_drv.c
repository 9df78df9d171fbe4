// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel: a DRM render-node driver for QEMU's edu PCI device (1234:11e8).
 *
 * Probe is fully managed (pcim_, devm_, drmm_), so remove only unplugs the DRM device;
 * everything that could touch the hardware afterwards checks drm_dev_enter() first.
 */
#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_ioctl.h>
#include <drm/drm_managed.h>
#include <drm/drm_print.h>
#include <linux/dma-direct.h>
#include <linux/iommu.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/swiotlb.h>

#include <uapi/drm/edu_accel.h>

#include "edu_accel_compat.h"
#include "edu_accel_drv.h"
#include "edu_accel_gem.h"
#include "edu_accel_hw.h"
#include "edu_accel_job.h"

#define EDU_PCI_VENDOR	0x1234
#define EDU_PCI_DEVICE	0x11e8

static unsigned int dma_bits = 28;
module_param(dma_bits, uint, 0444);
MODULE_PARM_DESC(dma_bits,
		 "DMA address width in bits (12..64); must match QEMU's edu dma_mask (default 28)");

static unsigned int max_bounce_pct = 50;
module_param(max_bounce_pct, uint, 0444);
MODULE_PARM_DESC(max_bounce_pct,
		 "Without an IOMMU, the share of the swiotlb bounce pool (shared by every device's streaming DMA) one device's BO mappings may hold, in percent; BO_USERPTR, BO_CREATE and imports fail with -ENOMEM past it (default 50)");

/*
 * As ivpu's test_mode: the debugfs fault knobs (dropped and raised interrupts, delays, a stuck
 * engine) exist only when the module is loaded with it. An unsafe parameter, so setting it
 * taints the kernel: no production system runs with knobs that fail jobs on purpose.
 */
bool edu_test_mode;
module_param_named_unsafe(test_mode, edu_test_mode, bool, 0444);
MODULE_PARM_DESC(test_mode,
		 "Create the debugfs fault-injection knobs (tests only; taints the kernel) (default N)");

/* Largest DMA segment: contiguous pages merge up to here (one segment per BO with an IOMMU). */
#define EDU_MAX_SEGMENT		SZ_1G

static int edu_ioctl_get_param(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_get_param *args = data;
	struct edu_accel_device *edev = to_edu(drm);
	struct edu_client *client = edu_file_client(file);

	if (args->pad)
		return -EINVAL;
	switch (args->param) {
	case DRM_EDU_ACCEL_PARAM_DRIVER_VERSION:
		args->value = (DRM_EDU_ACCEL_VERSION_MAJOR << 16) | DRM_EDU_ACCEL_VERSION_MINOR;
		break;
	case DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS:
		args->value = edev->dma_bits;
		break;
	case DRM_EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE:
		args->value = EDU_DEV_BUF_SIZE;
		break;
	case DRM_EDU_ACCEL_PARAM_MAX_TRANSFER:
		args->value = EDU_MAX_XFER;
		break;
	case DRM_EDU_ACCEL_PARAM_IOMMU:
		args->value = edev->iommu;
		break;
	case DRM_EDU_ACCEL_PARAM_MAX_BO_SIZE:
		args->value = EDU_MAX_BO_SIZE;
		break;
	case DRM_EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE:
		args->value = dma_get_max_seg_size(&edev->pdev->dev);
		break;
	case DRM_EDU_ACCEL_PARAM_MAX_QUEUES:
		args->value = EDU_MAX_QUEUES;
		break;
	case DRM_EDU_ACCEL_PARAM_MAX_OPS:
		args->value = EDU_MAX_OPS;
		break;
	case DRM_EDU_ACCEL_PARAM_MAX_SYNCS:
		args->value = EDU_MAX_SYNCS;
		break;
	case DRM_EDU_ACCEL_PARAM_MAX_JOB_BYTES:
		args->value = edu_max_job_bytes();
		break;
	case DRM_EDU_ACCEL_PARAM_PINNED_BYTES:
		args->value = atomic64_read(&client->pinned_bytes);
		break;
	case DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET: {
		struct edu_file *ef = file->driver_priv;

		args->value = drm_vma_node_offset_addr(&ef->completion->base.vma_node);
		break;
	}
	default:
		return -EINVAL;
	}
	return 0;
}

/*
 * Every ioctl but QUEUE_DESTROY and BO_WAIT fails with -ENODEV once the device is unplugged
 * (the uapi's promise): these run inside drm_dev_enter() from start to end.
 */
static int edu_ioctl_entered(struct drm_device *drm, void *data, struct drm_file *file,
			     drm_ioctl_t *fn)
{
	int idx, ret;

	if (!drm_dev_enter(drm, &idx))
		return -ENODEV;
	ret = fn(drm, data, file);
	drm_dev_exit(idx);
	return ret;
}

static int edu_entered_get_param(struct drm_device *drm, void *data, struct drm_file *file)
{
	return edu_ioctl_entered(drm, data, file, edu_ioctl_get_param);
}

static int edu_entered_bo_create(struct drm_device *drm, void *data, struct drm_file *file)
{
	return edu_ioctl_entered(drm, data, file, edu_ioctl_bo_create);
}

static int edu_entered_bo_userptr(struct drm_device *drm, void *data, struct drm_file *file)
{
	return edu_ioctl_entered(drm, data, file, edu_ioctl_bo_userptr);
}

static int edu_entered_bo_info(struct drm_device *drm, void *data, struct drm_file *file)
{
	return edu_ioctl_entered(drm, data, file, edu_ioctl_bo_info);
}

static int edu_entered_queue_create(struct drm_device *drm, void *data, struct drm_file *file)
{
	return edu_ioctl_entered(drm, data, file, edu_ioctl_queue_create);
}

static int edu_entered_submit(struct drm_device *drm, void *data, struct drm_file *file)
{
	return edu_ioctl_entered(drm, data, file, edu_ioctl_submit);
}

static const struct drm_ioctl_desc edu_accel_ioctls[] = {
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_GET_PARAM, edu_entered_get_param, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_BO_CREATE, edu_entered_bo_create, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_BO_USERPTR, edu_entered_bo_userptr, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_BO_INFO, edu_entered_bo_info, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_QUEUE_CREATE, edu_entered_queue_create, DRM_RENDER_ALLOW),
	/*
	 * Not entered: it touches no register, and it may sleep until the queue's jobs reached
	 * the engine, which must not hold up drm_dev_unplug().
	 */
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_QUEUE_DESTROY, edu_ioctl_queue_destroy, DRM_RENDER_ALLOW),
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_SUBMIT, edu_entered_submit, DRM_RENDER_ALLOW),
	/* Not entered either: it only waits, possibly for another driver's work. */
	DRM_IOCTL_DEF_DRV(EDU_ACCEL_BO_WAIT, edu_ioctl_bo_wait, DRM_RENDER_ALLOW),
};

static void edu_client_release(struct kref *ref)
{
	struct edu_client *client = container_of(ref, struct edu_client, ref);

	list_del(&client->link);
	mutex_unlock(&client->edev->obj_lock);
	kfree(client);
}

/**
 * edu_client_put - drop a reference on a client's accounting
 * @client: the client
 */
void edu_client_put(struct edu_client *client)
{
	kref_put_mutex(&client->ref, edu_client_release, &client->edev->obj_lock);
}

static int edu_accel_open(struct drm_device *drm, struct drm_file *file)
{
	struct edu_accel_device *edev = to_edu(drm);
	struct edu_client *client;
	int ret;

	client = kzalloc(sizeof(*client), GFP_KERNEL_ACCOUNT);
	if (!client)
		return -ENOMEM;
	kref_init(&client->ref);
	client->edev = edev;
	client->id = atomic64_inc_return(&edev->next_client_id);
	client->tgid = task_tgid_nr(current);
	get_task_comm(client->comm, current);
	mutex_lock(&edev->obj_lock);
	list_add_tail(&client->link, &edev->clients);
	mutex_unlock(&edev->obj_lock);
	ret = edu_file_open(file, client);
	if (ret)
		edu_client_put(client);
	return ret;
}

/* The per-file state (and through it the client) lives on while queues hold jobs. */
static void edu_accel_postclose(struct drm_device *drm, struct drm_file *file)
{
	edu_file_close(file);
}

/*
 * /proc/<pid>/fdinfo/<fd> in the kernel's drm-usage-stats format
 * (Documentation/gpu/drm-usage-stats.rst): drm-client-id is the number every tracepoint and
 * debugfs file names the client by, which is how a process joins its own trace to the
 * driver's. 6.1's DRM core prints nothing here itself.
 */
static void edu_accel_show_fdinfo(struct seq_file *m, struct file *f)
{
	struct drm_file *file = f->private_data;
	struct drm_device *drm = file->minor->dev;
	struct edu_client *client = edu_file_client(file);

	seq_printf(m, "drm-driver:\t%s\n", drm->driver->name);
	seq_printf(m, "drm-pdev:\t%s\n", dev_name(drm->dev));
	seq_printf(m, "drm-client-id:\t%llu\n", client->id);
	/* drm-usage-stats: engine busy time, and the memory this file's BOs pin (all system RAM). */
	seq_printf(m, "drm-engine-dma:\t%lld ns\n", atomic64_read(&client->engine_ns));
	seq_printf(m, "drm-memory-system:\t%lld KiB\n", atomic64_read(&client->pinned_bytes) >> 10);
	/* Driver-specific keys carry the driver's name as prefix (drm-usage-stats.rst). */
	seq_printf(m, "edu_accel-transfers:\t%lld\n", atomic64_read(&client->transfers));
}

static const struct file_operations edu_accel_fops = {
	.owner = THIS_MODULE,
	DRM_GEM_FOPS,
	.show_fdinfo = edu_accel_show_fdinfo,
};

static const struct drm_driver edu_accel_driver = {
	.driver_features = DRIVER_GEM | DRIVER_RENDER | DRIVER_SYNCOBJ | DRIVER_SYNCOBJ_TIMELINE,
	.open = edu_accel_open,
	.postclose = edu_accel_postclose,
	.ioctls = edu_accel_ioctls,
	.num_ioctls = ARRAY_SIZE(edu_accel_ioctls),
	.fops = &edu_accel_fops,
	.prime_handle_to_fd = drm_gem_prime_handle_to_fd,
	.prime_fd_to_handle = edu_prime_fd_to_handle,
	.gem_prime_import = edu_gem_prime_import,
	.debugfs_init = edu_accel_debugfs_init,
	.name = EDU_ACCEL_NAME,
	.desc = "QEMU edu device as a DMA accelerator",
	.date = "20261203",
	.major = DRM_EDU_ACCEL_VERSION_MAJOR,
	.minor = DRM_EDU_ACCEL_VERSION_MINOR,
};

/* dma-direct (no IOMMU, or an identity domain) hands the device physical addresses. */
static bool edu_dma_translated(struct device *dev)
{
	struct iommu_domain *domain = iommu_get_domain_for_dev(dev);

	return domain && domain->type != IOMMU_DOMAIN_IDENTITY;
}

/*
 * Where every streaming mapping bounces (swiotlb=force, confidential guests) and there is no
 * IOMMU, the device must reach the bounce pool itself: a pool beyond its mask makes every
 * mapping fail, each with a WARN from the DMA layer that any user could trigger. Refused once,
 * at probe, with the reason. The pool's bounds have no accessor; 6.1's is_swiotlb_buffer()
 * reads the same fields (compat probe: kernels with one pool range).
 */
static int edu_check_bounce_pool(struct edu_accel_device *edev)
{
#if IS_ENABLED(CONFIG_SWIOTLB) && defined(EDU_HAVE_SWIOTLB_MEM_END)
	struct device *dev = &edev->pdev->dev;
	struct io_tlb_mem *mem = dev->dma_io_tlb_mem;
	phys_addr_t last;

	if (edev->iommu || !is_swiotlb_force_bounce(dev) || !mem->nslabs)
		return 0;
	last = mem->end - 1;
	if (phys_to_dma(dev, last) <= DMA_BIT_MASK(edev->dma_bits))
		return 0;
	drm_err(&edev->drm,
		"every DMA mapping bounces through swiotlb at %pa-%pa, beyond the device's %u-bit mask: not binding (boot with less memory, give the device a wider mask, or an IOMMU)\n",
		&mem->start, &last, edev->dma_bits);
	return -ERANGE;
#else
	return 0;
#endif
}

/*
 * Where BO mappings may bounce (no IOMMU, a swiotlb pool: swiotlb=force, confidential guests,
 * memory beyond the mask of an exporter's pages), each mapping holds its slots while the BO
 * lives. The pool's size has no accessor; 6.1's is_swiotlb_buffer() reads the same fields.
 */
static void edu_set_bounce_limit(struct edu_accel_device *edev)
{
	edev->bounce_limit = U64_MAX;
#if IS_ENABLED(CONFIG_SWIOTLB) && defined(EDU_HAVE_SWIOTLB_MEM_END)
	{
		struct device *dev = &edev->pdev->dev;
		struct io_tlb_mem *mem = dev->dma_io_tlb_mem;

		if (edev->iommu || !is_swiotlb_active(dev) || !mem)
			return;
		edev->bounce_limit = div_u64((u64)(mem->end - mem->start) * min(max_bounce_pct, 100U),
					     100);
	}
#endif
}

static int edu_accel_setup_irq(struct edu_accel_device *edev)
{
	struct pci_dev *pdev = edev->pdev;
	int nvec, ret;

	nvec = pci_alloc_irq_vectors(pdev, 1, 1, PCI_IRQ_MSI | PCI_IRQ_LEGACY);
	if (nvec < 0)
		return nvec;
	edev->irq_is_msi = pdev->msi_enabled;
	/* INTx may be shared with other devices: the handler checks its own status first. */
	ret = edu_engine_request_irq(edev, pci_irq_vector(pdev, 0),
				     edev->irq_is_msi ? 0 : IRQF_SHARED);
	return ret;
}

static int edu_accel_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct edu_accel_device *edev;
	int ret;

	if (dma_bits < 12 || dma_bits > 64) {
		dev_err(&pdev->dev, "dma_bits=%u is outside 12..64\n", dma_bits);
		return -EINVAL;
	}

	edev = devm_drm_dev_alloc(&pdev->dev, &edu_accel_driver, struct edu_accel_device, drm);
	if (IS_ERR(edev))
		return PTR_ERR(edev);
	edev->pdev = pdev;
	edev->dma_bits = dma_bits;
	INIT_LIST_HEAD(&edev->bos);
	INIT_LIST_HEAD(&edev->clients);
	ret = drmm_mutex_init(&edev->drm, &edev->obj_lock);
	if (ret)
		return ret;
	ret = drmm_mutex_init(&edev->drm, &edev->write_maps_lock);
	if (ret)
		return ret;
	ret = drmm_mutex_init(&edev->drm, &edev->import_lock);
	if (ret)
		return ret;
	xa_init(&edev->write_maps);
	pci_set_drvdata(pdev, edev);

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = pcim_iomap_regions(pdev, BIT(0), EDU_ACCEL_NAME);
	if (ret)
		return ret;
	edev->regs = pcim_iomap_table(pdev)[0];
	pci_set_master(pdev);

	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(dma_bits));
	if (ret) {
		drm_err(&edev->drm, "cannot use a %u-bit DMA mask\n", dma_bits);
		return ret;
	}
	/* A bounce-buffering DMA layer (swiotlb) maps at most dma_max_mapping_size() at once. */
	ret = dma_set_max_seg_size(&pdev->dev,
				   min_t(size_t, EDU_MAX_SEGMENT, dma_max_mapping_size(&pdev->dev)));
	if (ret)
		return ret;
	edev->iommu = edu_dma_translated(&pdev->dev);
	ret = edu_check_bounce_pool(edev);
	if (ret)
		return ret;
	edu_set_bounce_limit(edev);

	ret = edu_hw_init(edev);
	if (ret)
		return ret;
	ret = edu_engine_init(edev);
	if (ret)
		return ret;
	ret = edu_sched_init(edev);
	if (ret)
		return ret;
	ret = edu_accel_setup_irq(edev);
	if (ret) {
		drm_err(&edev->drm, "no interrupt: %d\n", ret);
		return ret;
	}

	ret = drm_dev_register(&edev->drm, 0);
	if (ret)
		return ret;
	drm_info(&edev->drm, "bound %s: %s, %u-bit DMA%s\n", pci_name(pdev),
		 edev->irq_is_msi ? "MSI" : "INTx", dma_bits, edev->iommu ? " via IOMMU" : "");
	return 0;
}

static void edu_accel_remove(struct pci_dev *pdev)
{
	struct edu_accel_device *edev = pci_get_drvdata(pdev);

	drm_dev_unplug(&edev->drm);
	/*
	 * Jobs may still be on the engine: the transfer in flight ends (IRQs still work), the
	 * rest fail with -ENODEV. Only once the device can no longer reach memory (bus
	 * mastering off) do fences signal and buffers lose their mappings.
	 */
	edu_engine_stop(edev);
	edu_engine_fini(edev);
	edu_bo_unmap_all(edev);
	edu_sched_drain(edev);
}

/* Reboot, poweroff, kexec: the next kernel must not meet a live transfer. */
static void edu_accel_shutdown(struct pci_dev *pdev)
{
	struct edu_accel_device *edev = pci_get_drvdata(pdev);

	if (edev)
		edu_engine_halt(edev);
}

static const struct pci_device_id edu_accel_ids[] = {
	{ PCI_DEVICE(EDU_PCI_VENDOR, EDU_PCI_DEVICE) },
	{ }
};
MODULE_DEVICE_TABLE(pci, edu_accel_ids);

static struct pci_driver edu_accel_pci_driver = {
	.name = EDU_ACCEL_NAME,
	.id_table = edu_accel_ids,
	.probe = edu_accel_probe,
	.remove = edu_accel_remove,
	.shutdown = edu_accel_shutdown,
};

static int __init edu_accel_init(void)
{
	int ret = edu_fences_init();

	if (ret)
		return ret;
	return pci_register_driver(&edu_accel_pci_driver);
}
module_init(edu_accel_init);

static void __exit edu_accel_exit(void)
{
	pci_unregister_driver(&edu_accel_pci_driver);
}
module_exit(edu_accel_exit);

MODULE_DESCRIPTION("DRM driver for QEMU's edu device as a DMA accelerator");
MODULE_AUTHOR("edu-accel developers");
MODULE_LICENSE("GPL");
