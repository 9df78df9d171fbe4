// SPDX-License-Identifier: GPL-2.0
/*
 * PRIME: BOs shared as dma-bufs with other devices and drivers.
 *
 * Export: a BO_CREATE or writable userptr BO becomes a dma-buf whose pages stay pinned for as
 * long as the dma-buf lives (it holds the BO, the DRM device and this module). Each importer
 * attaches and gets its own DMA mapping of the pages, made for its device (with an IOMMU, its
 * own IOVAs); the BO's mapping for edu is not shared. BO_CREATE memory can be mapped through
 * the dma-buf's fd.
 *
 * Import: the importing device attaches to the dma-buf and maps it once; the BO's DMA segments
 * are that mapping, checked against the DMA mask like the driver's own. Importing our own
 * export on the same device gives back the exported BO.
 *
 * Ownership: a job moves the ranges it uses to the device and back (dma_sync_*) on whichever
 * mapping it uses, ours or the attachment's, so bounce-buffered imports carry the right bytes.
 * CPU access through another importer's mapping is that importer's business.
 */
#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_prime.h>
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/module.h>
#include <linux/swiotlb.h>

#include <uapi/drm/edu_accel.h>

#include "edu_accel_drv.h"
#include "edu_accel_gem.h"
#include "edu_accel_job.h"

MODULE_IMPORT_NS(DMA_BUF);

static struct sg_table *edu_dmabuf_pages(struct drm_gem_object *obj)
{
	struct edu_bo *bo = to_edu_bo(obj);

	return drm_prime_pages_to_sg(obj->dev, bo->pages, bo->npages);
}

static int edu_dmabuf_mmap(struct dma_buf *buf, struct vm_area_struct *vma)
{
	struct drm_gem_object *obj = buf->priv;
	int ret;

	ret = edu_bo_mmap_prepare(to_edu_bo(obj), vma);
	if (ret)
		return ret;
	vma->vm_ops = &edu_bo_vm_ops;
	vma->vm_private_data = obj;
	drm_gem_object_get(obj);	/* dropped by drm_gem_vm_close() */
	return 0;
}

/*
 * Each attachment gets a table of its own over the BO's pages, mapped for the importer's
 * device: edu's own mapping of the BO is never shared (it goes at edu's unbind).
 */
static struct sg_table *edu_dmabuf_map(struct dma_buf_attachment *attach,
				       enum dma_data_direction dir)
{
	struct sg_table *sgt;
	int ret;

	sgt = edu_dmabuf_pages(attach->dmabuf->priv);
	if (IS_ERR(sgt))
		return sgt;
	ret = dma_map_sgtable(attach->dev, sgt, dir, DMA_ATTR_SKIP_CPU_SYNC);
	if (ret) {
		sg_free_table(sgt);
		kfree(sgt);
		return ERR_PTR(ret);
	}
	return sgt;
}

/*
 * No begin/end_cpu_access: DMA_BUF_IOCTL_SYNC already waits for the reservation's fences, and
 * each job syncs its own mappings for the CPU before its fence signals. Syncing importers'
 * cached mappings from here would copy a bounced mapping's stale slot over the CPU's data.
 */
static const struct dma_buf_ops edu_dmabuf_ops = {
	.cache_sgt_mapping = true,
	.map_dma_buf = edu_dmabuf_map,
	.unmap_dma_buf = drm_gem_unmap_dma_buf,
	.release = drm_gem_dmabuf_release,
	.mmap = edu_dmabuf_mmap,
};

/**
 * edu_bo_export - &drm_gem_object_funcs.export: the BO as a dma-buf
 * @obj: the BO
 * @flags: the dma-buf file's flags (O_CLOEXEC, O_RDWR)
 *
 * A READONLY userptr BO was pinned without write access, which an importer's device could
 * write through (-EACCES); an invalidated one no longer holds its range's pages (-ESTALE). An
 * import is its exporter's dma-buf again. (The completion page has no handle to export.)
 *
 * Return: the dma-buf, or an ERR_PTR.
 */
struct dma_buf *edu_bo_export(struct drm_gem_object *obj, int flags)
{
	struct edu_bo *bo = to_edu_bo(obj);
	struct dma_buf_export_info info = {
		.exp_name = KBUILD_MODNAME,
		.owner = THIS_MODULE,
		.ops = &edu_dmabuf_ops,
		.size = obj->size,
		.flags = flags,
		.priv = obj,
		.resv = obj->resv,
	};

	if (bo->import_buf) {
		get_dma_buf(bo->import_buf);
		return bo->import_buf;
	}
	if (bo->flags & DRM_EDU_ACCEL_BO_INFO_READONLY)
		return ERR_PTR(-EACCES);
	if (edu_bo_invalidated(bo))
		return ERR_PTR(-ESTALE);
	return drm_gem_dmabuf_export(obj->dev, &info);
}

/**
 * edu_bo_import_detach - end an import's attachment (unbind, or the BO's end)
 * @bo: an imported BO
 *
 * Detaching unmaps the attachment's table (the DMA layer cached it); the BO's copy of the
 * table's header is cleared with it. The dma-buf stays referenced until the BO is freed.
 */
void edu_bo_import_detach(struct edu_bo *bo)
{
	dma_buf_detach(bo->import_buf, bo->attach);
	bo->attach = NULL;
	bo->sgt = (struct sg_table){};
}

/**
 * edu_gem_prime_import - &drm_driver.gem_prime_import
 * @drm: the importing device
 * @buf: the dma-buf
 *
 * Return: the GEM object, or an ERR_PTR.
 */
struct drm_gem_object *edu_gem_prime_import(struct drm_device *drm, struct dma_buf *buf)
{
	struct edu_accel_device *edev = to_edu(drm);
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;
	struct edu_bo *bo;
	int idx;

	if (buf->ops == &edu_dmabuf_ops && ((struct drm_gem_object *)buf->priv)->dev == drm) {
		drm_gem_object_get(buf->priv);
		return buf->priv;
	}
	/* Only edu_prime_fd_to_handle() calls here, with the importing file's client set. */
	if (WARN_ON_ONCE(!edev->importer))
		return ERR_PTR(-EINVAL);
	/*
	 * The exporter maps for us, and without an IOMMU or bounce buffers dma-direct fails a
	 * page above the mask with a warning any user could trigger: a device that cannot reach
	 * all of memory imports nothing there.
	 */
	if (!edev->iommu && dma_addressing_limited(drm->dev) && !is_swiotlb_active(drm->dev)) {
		drm_dbg_driver(drm, "import refused: %u-bit DMA mask, no IOMMU, no bounce buffers\n",
			       edev->dma_bits);
		return ERR_PTR(-ERANGE);
	}
	if (!drm_dev_enter(drm, &idx))
		return ERR_PTR(-ENODEV);
	attach = dma_buf_attach(buf, drm->dev);
	if (IS_ERR(attach)) {
		drm_dev_exit(idx);
		return ERR_CAST(attach);
	}
	get_dma_buf(buf);
	sgt = dma_buf_map_attachment_unlocked(attach, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt)) {
		dma_buf_detach(buf, attach);
		dma_buf_put(buf);
		drm_dev_exit(idx);
		return ERR_CAST(sgt);
	}
	bo = edu_bo_import_mapped(edev, edev->importer, buf, attach, sgt);
	drm_dev_exit(idx);
	return IS_ERR(bo) ? ERR_CAST(bo) : &bo->base;
}

/**
 * edu_prime_fd_to_handle - &drm_driver.prime_fd_to_handle: DRM's, with the importing file's
 * client known to edu_gem_prime_import()
 * @drm: the device
 * @file: the importing file
 * @fd: the dma-buf's fd
 * @handle: out, the GEM handle
 *
 * Return: 0 or a negative errno.
 */
int edu_prime_fd_to_handle(struct drm_device *drm, struct drm_file *file, int fd, u32 *handle)
{
	struct edu_accel_device *edev = to_edu(drm);
	int ret;

	ret = mutex_lock_interruptible(&edev->import_lock);
	if (ret)
		return ret;
	edev->importer = edu_file_client(file);
	ret = drm_gem_prime_fd_to_handle(drm, file, fd, handle);
	edev->importer = NULL;
	mutex_unlock(&edev->import_lock);
	return ret;
}
