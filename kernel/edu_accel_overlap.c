// SPDX-License-Identifier: GPL-2.0
/*
 * How many device-writable DMA mappings of one page a device holds at once.
 *
 * Two registrations of the same user memory (two files, or one file twice) each DMA-map the
 * pages. The DMA API tolerates such overlapping streaming mappings only with
 * DMA_ATTR_SKIP_CPU_SYNC and only up to a point: its debug checker counts overlaps of a
 * device-writable mapping per cacheline in a 3-bit counter and WARNs past 7 extra mappings
 * (kernel/dma/debug.c; mappings the device only reads are not counted). The driver keeps
 * every registration inside that rule on every kernel, so a debug kernel and a production one
 * accept the same programs: a BO whose scatter-gather runs would start on a page that
 * EDU_MAX_WRITE_MAPPINGS device-writable mappings already start on is refused.
 *
 * The count is kept per page at the start of each CPU scatterlist entry, which is where the
 * checker looks (it tracks the first cacheline of each entry); counting the page is coarser
 * than the cacheline, so the driver refuses at or before the point the checker would WARN.
 *
 * Most pages are never shared, and an xarray store and erase per page was more than half of
 * registering scattered memory. So the first mapping of a page nobody else has pinned is not
 * counted: a small page whose only pin is this BO's cannot start another mapping of ours
 * (each holds its own pin). The count of a page is then at least its mappings minus one:
 *  - a page pinned by this BO alone gets an uncounted mapping (there was none before);
 *  - any other claim counts (pins of read-only registrations, other drivers or a large
 *    folio's other pages only make it count more than it must);
 *  - releasing a mapping takes one off the page's count, if it has one: a counted mapping
 *    its own, an uncounted one that of a mapping which then stands in for it. So a release
 *    need not know how its claim went.
 * A claim is refused once the count reaches EDU_MAX_WRITE_MAPPINGS - 1, which bounds the
 * mappings at EDU_MAX_WRITE_MAPPINGS.
 */
#include <linux/dma-direction.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/xarray.h>

#include <uapi/drm/edu_accel.h>

#include "edu_accel_drv.h"
#include "edu_accel_gem.h"

/*
 * Only registrations can share pages: BO_CREATE pages are the driver's, and registering a
 * BO's mmap writable is refused (-EOPNOTSUPP, a file mapping), so it is mapped read-only.
 */
static bool edu_bo_counts_writes(const struct edu_bo *bo)
{
	return (bo->flags & DRM_EDU_ACCEL_BO_INFO_USERPTR) && bo->dir != DMA_TO_DEVICE;
}

/* Pinned by the caller alone: a small folio holding exactly one pin's worth of references. */
static bool edu_page_pinned_once(struct page *page)
{
	struct folio *folio = page_folio(page);

	return !folio_test_large(folio) && folio_ref_count(folio) < 2 * GUP_PIN_COUNTING_BIAS;
}

static void edu_overlap_put(struct edu_accel_device *edev, unsigned long pfn)
{
	unsigned long n = xa_to_value(xa_load(&edev->write_maps, pfn));

	if (n > 1)
		xa_store(&edev->write_maps, pfn, xa_mk_value(n - 1), GFP_KERNEL_ACCOUNT);
	else if (n)
		xa_erase(&edev->write_maps, pfn);
}

/* Releases the claims of the first @count entries; the lock is held. */
static void edu_overlap_drop(struct edu_accel_device *edev, struct scatterlist *sgl,
			     unsigned int count)
{
	struct scatterlist *sg;
	unsigned int i;

	if (xa_empty(&edev->write_maps))	/* no page of the device is shared: nothing to drop */
		return;
	for_each_sg(sgl, sg, count, i)
		edu_overlap_put(edev, PHYS_PFN(sg_phys(sg)));
}

/* Counts one entry's start page; -ETOOMANYREFS past the limit. The lock is held. */
static int edu_overlap_count(struct edu_accel_device *edev, unsigned long pfn)
{
	unsigned long n = xa_to_value(xa_load(&edev->write_maps, pfn));

	if (n >= EDU_MAX_WRITE_MAPPINGS - 1)
		return -ETOOMANYREFS;
	return xa_err(xa_store(&edev->write_maps, pfn, xa_mk_value(n + 1), GFP_KERNEL_ACCOUNT));
}

/**
 * edu_bo_claim_write_mappings - count a BO's device-writable mapping before it is made
 * @edev: the device
 * @bo: BO whose @sgt is built (its pages pinned) but not yet mapped
 *
 * Return: 0 (also for mappings not counted), -ETOOMANYREFS when a page already
 * starts EDU_MAX_WRITE_MAPPINGS device-writable mappings, -ENOMEM.
 */
int edu_bo_claim_write_mappings(struct edu_accel_device *edev, struct edu_bo *bo)
{
	struct scatterlist *sg;
	unsigned int i;
	int ret = 0;

	if (!edu_bo_counts_writes(bo))
		return 0;
	mutex_lock(&edev->write_maps_lock);
	for_each_sgtable_sg(&bo->sgt, sg, i) {
		if (edu_page_pinned_once(sg_page(sg)))
			continue;
		ret = edu_overlap_count(edev, PHYS_PFN(sg_phys(sg)));
		if (ret)
			break;
	}
	/* Entries before i: their uncounted claims find no count (their pages had none). */
	if (ret)
		edu_overlap_drop(edev, bo->sgt.sgl, i);
	mutex_unlock(&edev->write_maps_lock);
	return ret;
}

/**
 * edu_bo_release_write_mappings - undo edu_bo_claim_write_mappings() once the BO is unmapped
 * @edev: the device
 * @bo: the BO
 */
void edu_bo_release_write_mappings(struct edu_accel_device *edev, struct edu_bo *bo)
{
	if (!edu_bo_counts_writes(bo))
		return;
	mutex_lock(&edev->write_maps_lock);
	edu_overlap_drop(edev, bo->sgt.sgl, bo->sgt.orig_nents);
	mutex_unlock(&edev->write_maps_lock);
}
