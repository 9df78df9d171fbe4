// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel buffer objects: host memory pinned and DMA-mapped for the device.
 *
 * Two kinds share one object type and one mapping path:
 *  - BO_CREATE: pages the driver allocates where the device can reach them and holds
 *    (cudaHostAlloc), mmap-able;
 *  - BO_USERPTR: a range of the caller's memory pinned with FOLL_LONGTERM (cudaHostRegister).
 * Both are charged to the calling user's RLIMIT_MEMLOCK (user->locked_vm, as io_uring does;
 * also counted in the process's VmPin).
 * Every DMA address is checked against the device mask before the device can see it: edu
 * silently truncates addresses it cannot reach.
 *
 * Mappings are made with DMA_ATTR_SKIP_CPU_SYNC: ownership passes to the device and back
 * around each job (edu_accel_sched.c), for the ranges the job uses.
 */
#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <drm/drm_gem.h>
#include <drm/drm_print.h>
#include <drm/drm_vma_manager.h>
#include <linux/delay.h>
#include <linux/dma-buf.h>
#include <linux/dma-direct.h>
#include <linux/dma-mapping.h>
#include <linux/error-injection.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/pagemap.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/user.h>
#include <linux/hugetlb_inline.h>
#include <linux/shmem_fs.h>
#include <linux/slab.h>
#include <linux/swiotlb.h>
#include <linux/uaccess.h>

#include <uapi/drm/edu_accel.h>

#include "edu_accel_drv.h"
#include "edu_accel_gem.h"
#include "edu_accel_trace.h"

/* Pin in batches of one page of page pointers, as ib_umem_get() does. */
#define EDU_PIN_BATCH	(PAGE_SIZE / sizeof(struct page *))

static unsigned int max_zone_dma_kb = 8192;
module_param(max_zone_dma_kb, uint, 0444);
MODULE_PARM_DESC(max_zone_dma_kb,
		 "ZONE_DMA memory (16 MiB for the whole machine) all BOs of all devices may hold, in KiB; BO_CREATE fails with -ENOMEM past it where a device reaches no higher memory (default 8192)");

/* Pages of ZONE_DMA held by BOs of every device (edu_alloc_reachable()). */
static atomic_long_t edu_zone_dma_pages = ATOMIC_LONG_INIT(0);

/*
 * Without a translating IOMMU, dma-direct would hand out the physical address (and on 6.1
 * WARN before failing); check every run against the mask ourselves first. On x86, the only
 * platform edu exists on, bus addresses without an IOMMU are physical addresses.
 */
static int edu_bo_check_direct(struct edu_accel_device *edev, struct edu_bo *bo)
{
	struct scatterlist *sg;
	int i;

	for_each_sgtable_sg(&bo->sgt, sg, i) {
		dma_addr_t addr = sg_phys(sg);

		if (!edu_range_reachable(edev, addr, sg->length)) {
			/*
			 * Any user can ask for this: a debug category (drm.debug=0x2), not the log.
			 * It says which page, where the caller only sees -ERANGE.
			 */
			drm_dbg_driver(&edev->drm,
				       "refusing a buffer at %pad+0x%x: above the %u-bit DMA mask\n",
				       &addr, sg->length, edev->dma_bits);
			return -ERANGE;
		}
	}
	return 0;
}

static int edu_bo_check_mapped(struct edu_accel_device *edev, struct edu_bo *bo)
{
	struct scatterlist *sg;
	int i;

	for_each_sgtable_dma_sg(&bo->sgt, sg, i) {
		if (!edu_range_reachable(edev, sg_dma_address(sg), sg_dma_len(sg))) {
			drm_dbg_driver(&edev->drm,
				       "a mapping (IOMMU or exporter) above the %u-bit DMA mask\n",
				       edev->dma_bits);
			return -ERANGE;
		}
	}
	return 0;
}

/*
 * With an IOMMU in lazy mode, IOVA space of mappings just torn down comes back only when the
 * flush queue drains (its timer runs every 10 ms): a 28-bit device has 256 MiB of it, which a
 * process registering and releasing 64 MiB in a loop exhausts. -ENOMEM then means "not yet":
 * wait for the queue a few times before believing it.
 */
static int edu_bo_map_sgtable(struct edu_accel_device *edev, struct edu_bo *bo)
{
	int ret, tries;

	for (tries = 0;; tries++) {
		ret = dma_map_sgtable(&edev->pdev->dev, &bo->sgt, bo->dir, DMA_ATTR_SKIP_CPU_SYNC);
		if (ret != -ENOMEM || !edev->iommu || tries == 50 || fatal_signal_pending(current))
			return ret;
		usleep_range(2000, 4000);
	}
}

/* Whether any segment's ownership transfers do work (the DMA API's answer, per address). */
static bool edu_sgt_needs_sync(struct device *dev, struct sg_table *sgt)
{
	struct scatterlist *sg;
	int i;

	for_each_sgtable_dma_sg(sgt, sg, i)
		if (dma_need_sync(dev, sg_dma_address(sg)))
			return true;
	return false;
}

/*
 * Without an IOMMU a mapping that bounces holds swiotlb slots for the BO's whole life. The
 * pool is fixed (64 MiB by default on 6.1) and shared with every device's streaming DMA
 * (virtio-blk's in a confidential guest): unbounded, a few processes registering memory would
 * deny I/O to the whole machine. Each device's BOs may hold bounce_limit bytes of it.
 */
static int edu_bo_charge_bounce(struct edu_accel_device *edev, struct edu_bo *bo)
{
	struct device *dev = &edev->pdev->dev;
	struct scatterlist *sg;
	u64 bytes = 0;
	int i;

	if (edev->bounce_limit == U64_MAX || !bo->need_sync)
		return 0;
	for_each_sgtable_dma_sg(&bo->sgt, sg, i)
		if (is_swiotlb_buffer(dev, dma_to_phys(dev, sg_dma_address(sg))))
			bytes += ALIGN(sg_dma_len(sg), IO_TLB_SIZE);
	if (!bytes)
		return 0;
	if (atomic64_add_return(bytes, &edev->bounced_bytes) > edev->bounce_limit) {
		atomic64_sub(bytes, &edev->bounced_bytes);
		drm_dbg_driver(&edev->drm, "bounce slots: %llu more bytes would pass the device's %llu\n",
			       bytes, edev->bounce_limit);
		return -ENOMEM;
	}
	bo->bounced = bytes;
	return 0;
}

static void edu_bo_uncharge_bounce(struct edu_accel_device *edev, struct edu_bo *bo)
{
	atomic64_sub(bo->bounced, &edev->bounced_bytes);
	bo->bounced = 0;
}

/* Builds the SG table over bo->pages (merging contiguous pages) and maps it. */
static noinline int edu_bo_dma_map(struct edu_accel_device *edev, struct edu_bo *bo)
{
	struct device *dev = &edev->pdev->dev;
	unsigned int max_seg = dma_get_max_seg_size(dev) & PAGE_MASK;
	int ret;

	ret = sg_alloc_table_from_pages_segment(&bo->sgt, bo->pages, bo->npages, 0,
						(u64)bo->npages << PAGE_SHIFT, max_seg,
						GFP_KERNEL_ACCOUNT);
	if (ret)
		return ret;
	if (!edev->iommu) {
		ret = edu_bo_check_direct(edev, bo);
		if (ret)
			goto free_table;
	}
	ret = edu_bo_claim_write_mappings(edev, bo);
	if (ret)
		goto free_table;
	ret = edu_bo_map_sgtable(edev, bo);
	if (ret)
		goto release;
	ret = edu_bo_check_mapped(edev, bo);
	if (ret)
		goto unmap;
	bo->need_sync = edu_sgt_needs_sync(dev, &bo->sgt);
	ret = edu_bo_charge_bounce(edev, bo);
	if (ret)
		goto unmap;
	bo->mapped = true;
	trace_edu_bo_map(bo->client_id, bo->user_ptr, bo->size, bo->sgt.orig_nents, bo->sgt.nents,
			 sg_dma_address(bo->sgt.sgl), sg_dma_len(bo->sgt.sgl), 0);
	return 0;

unmap:
	dma_unmap_sgtable(dev, &bo->sgt, bo->dir, DMA_ATTR_SKIP_CPU_SYNC);
release:
	edu_bo_release_write_mappings(edev, bo);
free_table:
	trace_edu_bo_map(bo->client_id, bo->user_ptr, bo->size, bo->sgt.orig_nents, 0, 0, 0, ret);
	sg_free_table(&bo->sgt);
	return ret;
}
EDU_ALLOW_ERROR_INJECTION(edu_bo_dma_map, ERRNO);

/* Called with the device's obj_lock held once the BO is published (see edu_bo_unmap_all()). */
static void edu_bo_dma_unmap_locked(struct edu_accel_device *edev, struct edu_bo *bo)
{
	if (bo->mapped) {
		trace_edu_bo_unmap(bo->client_id, bo->user_ptr, bo->sgt.nents);
		if (bo->import_buf) {
			/* The exporter made the mapping: detaching is what unmaps it. */
			edu_bo_import_detach(bo);
		} else {
			dma_unmap_sgtable(&edev->pdev->dev, &bo->sgt, bo->dir,
					  DMA_ATTR_SKIP_CPU_SYNC);
			edu_bo_release_write_mappings(edev, bo);
		}
		edu_bo_uncharge_bounce(edev, bo);
	}
	bo->mapped = false;
}

/**
 * edu_bo_unmap_all - the device is unbound: tear down every BO's DMA mapping now, not when
 * userspace lets go of the BO (the device the mappings were made for is gone)
 * @edev: the device, whose engine is stopped
 */
void edu_bo_unmap_all(struct edu_accel_device *edev)
{
	struct edu_bo *bo;

	mutex_lock(&edev->obj_lock);
	list_for_each_entry(bo, &edev->bos, dev_link)
		edu_bo_dma_unmap_locked(edev, bo);
	mutex_unlock(&edev->obj_lock);
}

/*
 * The budget is the user's, as io_uring's and the RDMA core's: user->locked_vm against
 * RLIMIT_MEMLOCK, so that a fork child (or another process of the same user) on the same file
 * does not start a fresh one. A caller with CAP_IPC_LOCK is not limited.
 */
static noinline int edu_charge_locked_vm(struct user_struct *user, unsigned long npages)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	unsigned long cur = atomic_long_read(&user->locked_vm);

	do {
		if (cur + npages > limit || cur + npages < cur)
			return -ENOMEM;
	} while (!atomic_long_try_cmpxchg(&user->locked_vm, &cur, cur + npages));
	return 0;
}
EDU_ALLOW_ERROR_INJECTION(edu_charge_locked_vm, ERRNO);

/*
 * Charges @bo's pages to the calling user (unless it may lock memory without limit) and
 * counts them in the caller's mm (VmPin), which is held until the BO goes.
 */
static int edu_bo_charge(struct edu_bo *bo)
{
	int ret;

	bo->mm = current->mm;
	mmgrab(bo->mm);
	if (!capable(CAP_IPC_LOCK)) {
		bo->user = get_uid(current_user());
		ret = edu_charge_locked_vm(bo->user, bo->npages);
		if (ret) {
			free_uid(bo->user);
			bo->user = NULL;
			return ret;
		}
	}
	atomic64_add(bo->npages, &bo->mm->pinned_vm);
	bo->charged = true;
	return 0;
}

/* Undoes edu_bo_charge(), and whatever part of it was done. */
static void edu_bo_uncharge(struct edu_bo *bo)
{
	if (!bo->mm)
		return;
	if (bo->charged) {
		atomic64_sub(bo->npages, &bo->mm->pinned_vm);
		if (bo->user)
			atomic_long_sub(bo->npages, &bo->user->locked_vm);
		bo->charged = false;
	}
	if (bo->user)
		free_uid(bo->user);
	bo->user = NULL;
	mmdrop(bo->mm);
	bo->mm = NULL;
}

static void edu_bo_release_pages(struct edu_bo *bo)
{
	unsigned long i;

	if (!bo->pages)
		return;
	trace_edu_bo_unpin(bo->client_id, bo->user_ptr, bo->npages);
	if (bo->flags & DRM_EDU_ACCEL_BO_INFO_USERPTR) {
		unpin_user_pages_dirty_lock(bo->pages, bo->npages,
					    !(bo->flags & DRM_EDU_ACCEL_BO_INFO_READONLY));
	} else {
		for (i = 0; i < bo->npages && bo->pages[i]; i++)
			__free_page(bo->pages[i]);
	}
	kvfree(bo->pages);
	bo->pages = NULL;
	if (bo->zone_dma_pages) {
		atomic_long_sub(bo->zone_dma_pages, &edu_zone_dma_pages);
		bo->zone_dma_pages = 0;
	}
}

static void edu_bo_free(struct drm_gem_object *obj)
{
	struct edu_bo *bo = to_edu_bo(obj);
	struct edu_accel_device *edev = to_edu(obj->dev);
	/* The completion page is the driver's: not pinned on anyone's behalf. */
	u64 bytes = bo->readonly_map ? 0 : (u64)bo->npages << PAGE_SHIFT;

	/* Only published BOs (see edu_bo_publish()) have a client and a list entry. */
	if (bo->client) {
		mutex_lock(&edev->obj_lock);
		list_del(&bo->dev_link);
		edu_bo_dma_unmap_locked(edev, bo);
		mutex_unlock(&edev->obj_lock);
		atomic64_sub(bytes, &edev->pinned_bytes);
		atomic64_sub(bytes, &bo->client->pinned_bytes);
		edu_client_put(bo->client);
	} else {
		edu_bo_dma_unmap_locked(edev, bo);
	}
	if (bo->import_buf) {
		if (bo->attach)	/* never mapped: the import failed before */
			edu_bo_import_detach(bo);
		dma_buf_put(bo->import_buf);
	} else if (bo->sgt.sgl) {
		sg_free_table(&bo->sgt);
	}
	if (bo->armed)
		mmu_interval_notifier_remove(&bo->notifier);
	if (bo->status)
		drm_gem_object_put(&bo->status->base);
	edu_bo_release_pages(bo);
	edu_bo_uncharge(bo);
	drm_gem_object_release(obj);
	kfree(bo);
}

/*
 * Pages are inserted on first touch, so a mapping survives MADV_DONTNEED (the next access
 * faults the same page back in) instead of raising SIGBUS.
 */
static vm_fault_t edu_bo_fault(struct vm_fault *vmf)
{
	struct drm_gem_object *obj = vmf->vma->vm_private_data;
	struct edu_bo *bo = to_edu_bo(obj);
	struct page *page;

	if (vmf->pgoff >= bo->npages)
		return VM_FAULT_SIGBUS;
	page = bo->pages[vmf->pgoff];
	get_page(page);
	vmf->page = page;
	return 0;
}

/**
 * edu_bo_mmap_prepare - check and set up a mapping of @bo's pages, through its GEM offset or
 * its dma-buf
 * @bo: the BO
 * @vma: the new mapping; its offset counts pages from the BO's start
 *
 * Only pages the driver allocated can be mapped: a userptr BO's pages are already the
 * process's (anonymous pages cannot be inserted into another mapping), and an import has none.
 *
 * Return: 0 or a negative errno.
 */
int edu_bo_mmap_prepare(struct edu_bo *bo, struct vm_area_struct *vma)
{
	if ((bo->flags & DRM_EDU_ACCEL_BO_INFO_USERPTR) || !bo->pages)
		return -EINVAL;
	/* A private mapping would copy on write and stop sharing pages with the device. */
	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (bo->readonly_map) {
		if (vma->vm_flags & VM_WRITE)
			return -EPERM;
		vma->vm_flags &= ~VM_MAYWRITE;
	}
	/*
	 * VM_DONTCOPY: a child does not inherit pinned memory shared with the parent (its
	 * writes would land in the parent's blocks), as RDMA does for registered memory.
	 */
	vma->vm_flags |= VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY;
	return 0;
}

static int edu_bo_mmap(struct drm_gem_object *obj, struct vm_area_struct *vma)
{
	vma->vm_pgoff -= drm_vma_node_start(&obj->vma_node);
	return edu_bo_mmap_prepare(to_edu_bo(obj), vma);
}

const struct vm_operations_struct edu_bo_vm_ops = {
	.fault = edu_bo_fault,
	.open = drm_gem_vm_open,
	.close = drm_gem_vm_close,
};

static const struct drm_gem_object_funcs edu_bo_funcs = {
	.free = edu_bo_free,
	.mmap = edu_bo_mmap,
	.vm_ops = &edu_bo_vm_ops,
	.export = edu_bo_export,
};

/* Makes bo visible: accounting, the device's BO list. The caller's reference is the BO's. */
static void edu_bo_publish(struct edu_accel_device *edev, struct edu_client *client,
			   struct edu_bo *bo)
{
	/* The completion page is the driver's: not pinned on anyone's behalf. */
	u64 bytes = bo->readonly_map ? 0 : (u64)bo->npages << PAGE_SHIFT;

	kref_get(&client->ref);
	bo->client = client;
	atomic64_add(bytes, &client->pinned_bytes);
	atomic64_add(bytes, &edev->pinned_bytes);
	mutex_lock(&edev->obj_lock);
	list_add_tail(&bo->dev_link, &edev->bos);
	mutex_unlock(&edev->obj_lock);
}

/*
 * BO_CREATE memory comes in blocks of up to 2^EDU_BO_MAX_ORDER pages: single pages come back
 * from the allocator in falling physical order and never merge, so a 1 MiB BO was 256 SG
 * entries and, without an IOMMU, 256 DMA segments (each segment boundary costs the engine a
 * transfer). 64 KiB blocks are what the buddy allocator usually has at hand; larger ones
 * would mean compaction, which __GFP_NORETRY keeps us out of (we fall back to smaller).
 */
#define EDU_BO_MAX_ORDER 4

/*
 * A zeroed block of 2^order pages the device can reach. Without an IOMMU and with a mask
 * narrower than RAM, as dma-direct does: ZONE_DMA32 first, and ZONE_DMA once DMA32 handed out
 * a block above the mask (*low is then set for the rest of the BO).
 */
static struct page *edu_alloc_reachable(struct edu_accel_device *edev, struct edu_bo *bo,
					bool limited, bool *low, unsigned int order)
{
	gfp_t gfp = GFP_USER | __GFP_ZERO | __GFP_ACCOUNT | __GFP_NOWARN;
	unsigned long n = 1UL << order;
	struct page *page;

	if (order)
		gfp |= __GFP_NORETRY;
	if (!limited)
		return alloc_pages(gfp, order);
	if (!*low) {
		page = alloc_pages(gfp | __GFP_DMA32, order);
		if (!page || edu_range_reachable(edev, page_to_phys(page), PAGE_SIZE << order))
			return page;
		__free_pages(page, order);
		*low = true;
	}
	/*
	 * ZONE_DMA is 16 MiB for the whole machine (ISA-era drivers, other devices' coherent
	 * memory): the driver's BOs may hold only a share of it, or two processes at the default
	 * memlock limit would exhaust it.
	 */
	if (atomic_long_add_return(n, &edu_zone_dma_pages) >
	    ((unsigned long)max_zone_dma_kb << 10) >> PAGE_SHIFT) {
		atomic_long_sub(n, &edu_zone_dma_pages);
		return NULL;
	}
	page = alloc_pages(gfp | GFP_DMA, order);
	if (page && !edu_range_reachable(edev, page_to_phys(page), PAGE_SIZE << order)) {
		__free_pages(page, order);
		page = NULL;
	}
	if (page)
		bo->zone_dma_pages += n;
	else
		atomic_long_sub(n, &edu_zone_dma_pages);
	return page;
}

static noinline int edu_bo_alloc_pages(struct edu_accel_device *edev, struct edu_bo *bo)
{
	bool limited = !edev->iommu && !bo->readonly_map &&
		       dma_addressing_limited(&edev->pdev->dev);
	unsigned int order = EDU_BO_MAX_ORDER;
	bool low = false;
	unsigned long i = 0, j;
	struct page *page;

	bo->pages = kvcalloc(bo->npages, sizeof(*bo->pages), GFP_KERNEL_ACCOUNT);
	if (!bo->pages)
		return -ENOMEM;
	while (i < bo->npages) {
		while (order && (1UL << order) > bo->npages - i)
			order--;
		page = edu_alloc_reachable(edev, bo, limited, &low, order);
		if (!page) {
			if (!order)
				return -ENOMEM;	/* the free callback releases what was allocated */
			order--;	/* and stays lower: a failed order rarely succeeds soon after */
			continue;
		}
		/* Order-0 pages from here on: freed, mapped and faulted in one by one. */
		if (order)
			split_page(page, order);
		for (j = 0; j < (1UL << order); j++)
			bo->pages[i + j] = page + j;
		i += 1UL << order;
		if (fatal_signal_pending(current))
			return -EINTR;
		/* Inside drm_dev_enter(): a gigabyte must not hold up an unplug. */
		if (drm_dev_is_unplugged(&edev->drm))
			return -ENODEV;
		cond_resched();
	}
	return 0;
}
EDU_ALLOW_ERROR_INJECTION(edu_bo_alloc_pages, ERRNO);

/**
 * edu_bo_create - allocate zeroed, pinned, DMA-mapped pages
 * @edev: the device
 * @client: who is accounted
 * @size: bytes, 1..EDU_MAX_BO_SIZE (rounded up to pages)
 * @readonly_map: the completion page: written by the driver only, never mapped for the
 *	device, mappable by userspace read-only, charged to no limit
 *
 * Other BOs are charged to the calling process's RLIMIT_MEMLOCK, as BO_USERPTR is.
 *
 * Return: the BO with one reference, or an ERR_PTR.
 */
struct edu_bo *edu_bo_create(struct edu_accel_device *edev, struct edu_client *client,
			     u64 size, bool readonly_map)
{
	struct edu_bo *bo;
	int ret;

	if (!size || size > EDU_MAX_BO_SIZE)
		return ERR_PTR(-EINVAL);
	size = PAGE_ALIGN(size);
	bo = kzalloc(sizeof(*bo), GFP_KERNEL_ACCOUNT);
	if (!bo)
		return ERR_PTR(-ENOMEM);
	bo->base.funcs = &edu_bo_funcs;
	drm_gem_private_object_init(&edev->drm, &bo->base, size);
	bo->dir = DMA_BIDIRECTIONAL;
	bo->size = size;
	bo->npages = size >> PAGE_SHIFT;
	bo->readonly_map = readonly_map;
	bo->client_id = client->id;

	if (!readonly_map) {
		ret = edu_bo_charge(bo);
		if (ret)
			goto put;
	}
	ret = edu_bo_alloc_pages(edev, bo);
	trace_edu_bo_pin(bo->client_id, 0, bo->npages, true, ret);
	if (ret)
		goto put;
	bo->vaddr = page_address(bo->pages[0]);
	if (!readonly_map) {
		ret = edu_bo_dma_map(edev, bo);
		if (ret)
			goto put;
	}
	ret = drm_gem_create_mmap_offset(&bo->base);
	if (ret)
		goto put;

	edu_bo_publish(edev, client, bo);
	return bo;

put:
	/* The free callback undoes whatever was done. */
	drm_gem_object_put(&bo->base);
	return ERR_PTR(ret);
}

/* Bytes the mapping's segments cover: the engine walks them for every offset below size. */
static u64 edu_sgt_dma_bytes(struct sg_table *sgt)
{
	struct scatterlist *sg;
	u64 bytes = 0;
	int i;

	for_each_sgtable_dma_sg(sgt, sg, i)
		bytes += sg_dma_len(sg);
	return bytes;
}

/**
 * edu_bo_import_mapped - a BO over a dma-buf another exporter mapped for this device
 * @edev: the device
 * @client: the importing file's accounting (charged nothing: the exporter owns the pages)
 * @buf: the dma-buf; its reference passes to the BO, also on failure
 * @attach: @buf's attachment to this device; the BO detaches it, also on failure
 * @sgt: the attachment's mapping
 *
 * The mapping gets the checks of the driver's own: every segment within the DMA mask, and
 * enough of them to cover the buffer.
 *
 * Return: the BO with one reference, or an ERR_PTR.
 */
struct edu_bo *edu_bo_import_mapped(struct edu_accel_device *edev, struct edu_client *client,
				    struct dma_buf *buf, struct dma_buf_attachment *attach,
				    struct sg_table *sgt)
{
	struct edu_bo *bo;
	int ret;

	bo = kzalloc(sizeof(*bo), GFP_KERNEL_ACCOUNT);
	if (!bo) {
		dma_buf_detach(buf, attach);
		dma_buf_put(buf);
		return ERR_PTR(-ENOMEM);
	}
	bo->base.funcs = &edu_bo_funcs;
	/* Fences of other drivers on the buffer and ours share one reservation object. */
	bo->base.resv = buf->resv;
	drm_gem_private_object_init(&edev->drm, &bo->base, buf->size);
	bo->import_buf = buf;
	bo->attach = attach;
	bo->dir = DMA_BIDIRECTIONAL;
	bo->size = buf->size;
	bo->flags = DRM_EDU_ACCEL_BO_INFO_IMPORTED;
	bo->client_id = client->id;
	bo->sgt = *sgt;

	ret = -EINVAL;
	if (!buf->size || buf->size > EDU_MAX_BO_SIZE || edu_sgt_dma_bytes(sgt) < buf->size)
		goto put;
	ret = edu_bo_check_mapped(edev, bo);
	if (ret)
		goto put;
	bo->need_sync = edu_sgt_needs_sync(&edev->pdev->dev, &bo->sgt);
	ret = edu_bo_charge_bounce(edev, bo);
	if (ret)
		goto put;
	bo->mapped = true;
	trace_edu_bo_map(bo->client_id, 0, bo->size, bo->sgt.orig_nents, bo->sgt.nents,
			 sg_dma_address(bo->sgt.sgl), sg_dma_len(bo->sgt.sgl), 0);
	edu_bo_publish(edev, client, bo);
	return bo;

put:
	drm_gem_object_put(&bo->base);
	return ERR_PTR(ret);
}

/**
 * edu_bo_lookup - find a BO by handle in this file
 * @file: the file
 * @handle: GEM handle
 *
 * Return: the BO with a new reference, or NULL.
 */
struct edu_bo *edu_bo_lookup(struct drm_file *file, u32 handle)
{
	struct drm_gem_object *obj = drm_gem_object_lookup(file, handle);

	return obj ? to_edu_bo(obj) : NULL;
}

int edu_ioctl_bo_create(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_bo_create *args = data;
	struct edu_bo *bo;
	u32 handle;
	int ret;

	if (args->flags)
		return -EINVAL;
	/* As BO_USERPTR: a zero limit means no pinned memory at all, not "too much". */
	if (!can_do_mlock())
		return -EPERM;
	bo = edu_bo_create(to_edu(drm), edu_file_client(file), args->size, false);
	if (IS_ERR(bo))
		return PTR_ERR(bo);
	ret = drm_gem_handle_create(file, &bo->base, &handle);
	if (!ret) {
		args->handle = handle;
		args->mmap_offset = drm_vma_node_offset_addr(&bo->base.vma_node);
	}
	drm_gem_object_put(&bo->base);
	return ret;
}

/*
 * A long-term pin of a file's page cache for writing stays away from the filesystem's
 * writeback (the page can be written while "clean"): refused like io_uring refuses it.
 * Anonymous, shmem/tmpfs and hugetlbfs memory are fine.
 */
static int edu_check_vmas(struct mm_struct *mm, unsigned long start, unsigned long end,
			  bool write)
{
	VMA_ITERATOR(vmi, mm, start);
	struct vm_area_struct *vma;

	if (!write)
		return 0;
	for_each_vma_range(vmi, vma, end) {
		if (vma->vm_file && !is_vm_hugetlb_page(vma) &&
		    !shmem_mapping(vma->vm_file->f_mapping))
			return -EOPNOTSUPP;
	}
	return 0;
}

static bool edu_userptr_invalidate(struct mmu_interval_notifier *mni,
				   const struct mmu_notifier_range *range, unsigned long cur_seq)
{
	struct edu_bo *bo = container_of(mni, struct edu_bo, notifier);
	struct drm_edu_accel_file_status *st;
	bool first;

	/* These keep the same pages in place (and a pinned page stays the parent's at fork). */
	switch (range->event) {
	case MMU_NOTIFY_PROTECTION_VMA:
	case MMU_NOTIFY_PROTECTION_PAGE:
	case MMU_NOTIFY_SOFT_DIRTY:
	case MMU_NOTIFY_EXCLUSIVE:
		return true;
	default:
		break;
	}
	spin_lock(&bo->notifier_lock);
	mmu_interval_set_seq(mni, cur_seq);
	first = bo->armed && !(bo->flags & DRM_EDU_ACCEL_BO_INFO_INVALIDATED);
	if (first)
		WRITE_ONCE(bo->flags, bo->flags | DRM_EDU_ACCEL_BO_INFO_INVALIDATED);
	spin_unlock(&bo->notifier_lock);
	if (first) {
		trace_edu_bo_invalidate(bo->client_id, bo->user_ptr, range->start, range->end,
					range->event);
		st = bo->status->vaddr + DRM_EDU_ACCEL_FILE_STATUS_OFFSET;
		/* Userspace reads it without a lock: publish the flag first. */
		smp_wmb();
		atomic64_inc((atomic64_t *)&st->invalidations);
	}
	return true;
}

static const struct mmu_interval_notifier_ops edu_userptr_notifier_ops = {
	.invalidate = edu_userptr_invalidate,
};

/*
 * The rule of edu_check_vmas() applied to a page pinned for writing: anonymous (a private
 * mapping's copy included), hugetlbfs, shmem, or no page cache at all (a driver's pages).
 */
static bool edu_page_write_pinnable(struct page *page)
{
	struct folio *folio = page_folio(page);
	struct address_space *mapping;

	if (folio_test_anon(folio) || folio_test_hugetlb(folio))
		return true;
	mapping = folio_mapping(folio);
	return !mapping || shmem_mapping(mapping);
}

/*
 * The VMA check runs before the pin, and mmap() into a hole of the range between the two
 * fires no notifier (nothing was mapped there): the pinned pages themselves decide, as
 * 6.5's folio_fast_pin_allowed() does inside GUP.
 */
static int edu_check_pinned_pages(struct page **pages, unsigned long n)
{
	unsigned long i;

	for (i = 0; i < n; i++)
		if (!edu_page_write_pinnable(pages[i]))
			return -EOPNOTSUPP;
	return 0;
}

static noinline int edu_pin_user_range(struct edu_accel_device *edev, struct edu_bo *bo,
				       unsigned long start)
{
	unsigned int gup = FOLL_LONGTERM;
	bool write = !(bo->flags & DRM_EDU_ACCEL_BO_INFO_READONLY);
	unsigned long pinned = 0;
	u32 delay_ms;
	int ret;

	if (write)
		gup |= FOLL_WRITE;
	mmap_read_lock(bo->mm);
	ret = edu_check_vmas(bo->mm, start, start + (bo->npages << PAGE_SHIFT), write);
	mmap_read_unlock(bo->mm);
	delay_ms = READ_ONCE(edev->pin_delay_ms);
	if (unlikely(delay_ms) && !ret)
		msleep_interruptible(min(delay_ms, 10000U));
	/*
	 * Pinned without the mmap lock (the fast walk, twice the speed of pin_user_pages()): a
	 * mapping that changes after the check is an invalidation of the watched range, so the
	 * caller's mmu_interval_read_retry() sees it and checks and pins again; one that appears
	 * in a hole is caught on the pages.
	 */
	while (!ret && pinned < bo->npages) {
		unsigned long n = min_t(unsigned long, bo->npages - pinned, EDU_PIN_BATCH);
		long got = pin_user_pages_fast(start + (pinned << PAGE_SHIFT), n, gup,
					       bo->pages + pinned);

		if (got <= 0) {
			ret = got ? got : -EFAULT;
		} else {
			if (write)
				ret = edu_check_pinned_pages(bo->pages + pinned, got);
			pinned += got;
		}
		if (!ret && fatal_signal_pending(current))
			ret = -EINTR;
	}
	if (ret)
		unpin_user_pages(bo->pages, pinned);
	return ret;
}
EDU_ALLOW_ERROR_INJECTION(edu_pin_user_range, ERRNO);

/*
 * Pins the range with its notifier in place, retrying while it changes under the pins (a
 * write pin breaking copy-on-write is itself such a change); from success on, an
 * invalidation marks the BO invalid.
 */
static int edu_userptr_pin_watched(struct edu_accel_device *edev, struct edu_bo *bo,
				   unsigned long start)
{
	unsigned long len = bo->npages << PAGE_SHIFT;
	int ret, tries;

	spin_lock_init(&bo->notifier_lock);
	ret = mmu_interval_notifier_insert(&bo->notifier, bo->mm, start, len,
					   &edu_userptr_notifier_ops);
	if (ret)
		return ret;
	for (tries = 0; tries < 4; tries++) {
		unsigned long seq = mmu_interval_read_begin(&bo->notifier);

		ret = edu_pin_user_range(edev, bo, start);
		if (ret)
			break;
		spin_lock(&bo->notifier_lock);
		if (!mmu_interval_read_retry(&bo->notifier, seq)) {
			bo->armed = true;
			spin_unlock(&bo->notifier_lock);
			return 0;
		}
		spin_unlock(&bo->notifier_lock);
		unpin_user_pages(bo->pages, bo->npages);
		ret = -EBUSY;
	}
	mmu_interval_notifier_remove(&bo->notifier);
	return ret;
}

int edu_ioctl_bo_userptr(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_bo_userptr *args = data;
	struct edu_accel_device *edev = to_edu(drm);
	struct edu_bo *bo, *status;
	unsigned long start, end;
	u32 handle;
	int ret;

	if (args->flags & ~DRM_EDU_ACCEL_BO_USERPTR_FLAGS)
		return -EINVAL;
	if (!args->size || args->size > EDU_MAX_BO_SIZE)
		return -EINVAL;
	if (args->user_ptr + args->size < args->user_ptr)
		return -EINVAL;
	if (!access_ok(u64_to_user_ptr(args->user_ptr), args->size))
		return -EFAULT;
	if (!can_do_mlock())
		return -EPERM;
	status = edu_file_status_page(file);

	start = args->user_ptr & PAGE_MASK;
	end = PAGE_ALIGN(args->user_ptr + args->size);
	bo = kzalloc(sizeof(*bo), GFP_KERNEL_ACCOUNT);
	if (!bo) {
		drm_gem_object_put(&status->base);
		return -ENOMEM;
	}
	bo->status = status;	/* read by the notifier: set before it is armed */
	bo->flags = DRM_EDU_ACCEL_BO_INFO_USERPTR;
	if (args->flags & DRM_EDU_ACCEL_BO_USERPTR_READONLY)
		bo->flags |= DRM_EDU_ACCEL_BO_INFO_READONLY;
	bo->dir = (bo->flags & DRM_EDU_ACCEL_BO_INFO_READONLY) ? DMA_TO_DEVICE : DMA_BIDIRECTIONAL;
	bo->npages = (end - start) >> PAGE_SHIFT;
	bo->size = args->size;
	bo->offset = offset_in_page(args->user_ptr);
	bo->user_ptr = args->user_ptr;
	bo->client_id = edu_file_client(file)->id;

	ret = edu_bo_charge(bo);
	if (ret)
		goto uncharge;
	bo->pages = kvmalloc_array(bo->npages, sizeof(*bo->pages), GFP_KERNEL_ACCOUNT);
	if (!bo->pages) {
		ret = -ENOMEM;
		goto uncharge;
	}
	ret = edu_userptr_pin_watched(edev, bo, start);
	trace_edu_bo_pin(bo->client_id, bo->user_ptr, bo->npages,
			 !(bo->flags & DRM_EDU_ACCEL_BO_INFO_READONLY), ret);
	if (ret)
		goto free_pages;
	ret = edu_bo_dma_map(edev, bo);
	if (ret)
		goto unpin;

	drm_gem_private_object_init(drm, &bo->base, (size_t)bo->npages << PAGE_SHIFT);
	bo->base.funcs = &edu_bo_funcs;
	edu_bo_publish(edev, edu_file_client(file), bo);
	/* From here the free callback owns the teardown. */
	ret = drm_gem_handle_create(file, &bo->base, &handle);
	if (!ret)
		args->handle = handle;
	drm_gem_object_put(&bo->base);
	return ret;

unpin:
	mmu_interval_notifier_remove(&bo->notifier);
	trace_edu_bo_unpin(bo->client_id, bo->user_ptr, bo->npages);
	unpin_user_pages(bo->pages, bo->npages);
free_pages:
	kvfree(bo->pages);
uncharge:
	edu_bo_uncharge(bo);
	kfree(bo);
	drm_gem_object_put(&status->base);
	return ret;
}

int edu_ioctl_bo_info(struct drm_device *drm, void *data, struct drm_file *file)
{
	struct drm_edu_accel_bo_info *args = data;
	struct edu_bo *bo;

	bo = edu_bo_lookup(file, args->handle);
	if (!bo)
		return -ENOENT;
	args->flags = bo->flags;
	args->size = bo->size;
	args->mmap_offset = (bo->flags & DRM_EDU_ACCEL_BO_INFO_USERPTR) ? 0 :
			    drm_vma_node_offset_addr(&bo->base.vma_node);
	args->user_ptr = bo->user_ptr;
	args->sg_nents = bo->sgt.orig_nents;
	args->dma_nents = bo->sgt.nents;
	drm_gem_object_put(&bo->base);
	return 0;
}

/**
 * edu_bo_sync - move ownership of a range of a mapped BO between the CPU and the device
 * @edev: the device the BO is mapped for
 * @bo: the BO
 * @off: start of the range, in bytes
 * @len: its length
 * @for_cpu: to the CPU (the device wrote it) or to the device (it is about to be read or
 *	written by DMA)
 *
 * Syncs only the DMA segments the range touches, each for only its part of the range. A
 * mapping whose syncs are no-ops (coherent, not bounced: dma_need_sync() was false for every
 * segment) is skipped without walking it. Process context: under bouncing a sync is a memcpy
 * of the range.
 *
 * Return: whether anything had to be synced.
 */
bool edu_bo_sync(struct edu_accel_device *edev, struct edu_bo *bo, u64 off, u64 len, bool for_cpu)
{
	struct device *dev = &edev->pdev->dev;
	struct scatterlist *sg;
	u64 base = 0;
	int i;

	if (!bo->mapped || !bo->need_sync)
		return false;
	for_each_sgtable_dma_sg(&bo->sgt, sg, i) {
		u64 seg = sg_dma_len(sg);

		if (off < base + seg && off + len > base) {
			u64 from = max(off, base) - base;
			u64 to = min(off + len, base + seg) - base;

			if (for_cpu)
				dma_sync_single_range_for_cpu(dev, sg_dma_address(sg), from,
							      to - from, bo->dir);
			else
				dma_sync_single_range_for_device(dev, sg_dma_address(sg), from,
								 to - from, bo->dir);
		}
		base += seg;
		if (base >= off + len)
			break;
	}
	return true;
}
