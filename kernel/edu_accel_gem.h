/* SPDX-License-Identifier: GPL-2.0 */
#ifndef EDU_ACCEL_GEM_H
#define EDU_ACCEL_GEM_H

#include <drm/drm_gem.h>
#include <linux/dma-direction.h>
#include <linux/mmu_notifier.h>
#include <linux/scatterlist.h>

#include <uapi/drm/edu_accel.h>

struct dma_buf;
struct dma_buf_attachment;
struct edu_accel_device;
struct edu_client;
struct drm_file;

/**
 * struct edu_bo - a buffer object: host pages pinned and DMA-mapped for one edu device
 * @base: GEM object; its reference count is the BO's lifetime
 * @client: accounting of the file that created it (outlives the file while the BO lives)
 * @client_id: that client's id, known before @client is set (for tracepoints)
 * @dev_link: entry in &edu_accel_device.bos, for debugfs
 * @pages: the pinned pages (BO_CREATE: pages the driver allocated; userptr: FOLL_PIN)
 * @npages: entries of @pages
 * @sgt: scatter-gather table over @pages, DMA-mapped while @mapped; for an import, a copy of
 *	the header of the table the exporter mapped for this device (the exporter owns the
 *	scatterlist)
 * @mapped: @sgt is mapped for the device
 * @need_sync: some segment of the mapping needs dma_sync_*() to pass ownership (swiotlb
 *	bounce slots, non-coherent DMA: dma_need_sync()); when false every sync is a no-op the
 *	jobs skip
 * @dir: direction the mapping was made for
 * @flags: DRM_EDU_ACCEL_BO_INFO_* as reported to userspace
 * @size: usable bytes
 * @offset: offset of byte 0 in the first page (userptr ranges need not be page aligned)
 * @user_ptr: registered start address (userptr)
 * @mm: mm charged with the pages (RLIMIT_MEMLOCK), held with mmgrab(); NULL for the
 *	completion page
 * @charged: @npages are counted in @mm's pinned_vm (and in @user's locked_vm if set)
 * @user: the user charged with the pages (RLIMIT_MEMLOCK), referenced; NULL when the caller
 *	had CAP_IPC_LOCK
 * @notifier: userptr: watches the range for unmaps and remaps
 * @notifier_lock: orders @armed against the notifier's invalidations
 * @armed: userptr: the pins are final; an invalidation from now on marks the BO invalid
 * @status: userptr: the creating file's completion page, whose file status counts
 *	invalidations (referenced)
 * @vaddr: kernel address of page 0 for driver-written pages (the completion page)
 * @readonly_map: userspace may map it only without write access
 * @zone_dma_pages: BO_CREATE: pages taken from ZONE_DMA, counted against the driver's share
 * @bounced: bytes of swiotlb bounce slots its mapping holds, counted in
 *	&edu_accel_device.bounced_bytes until the mapping goes
 * @import_buf: an imported dma-buf (referenced): the BO is another exporter's memory, it
 *	has no @pages, and its DMA mapping is @attach's
 * @attach: the import's attachment to this device, until the BO is freed or the device is
 *	unbound
 */
struct edu_bo {
	struct drm_gem_object base;
	struct edu_client *client;
	u64 client_id;
	struct list_head dev_link;
	struct page **pages;
	unsigned long npages;
	struct sg_table sgt;
	bool mapped;
	bool need_sync;
	enum dma_data_direction dir;
	u32 flags;
	u64 size;
	u32 offset;
	u64 user_ptr;
	struct mm_struct *mm;
	bool charged;
	struct user_struct *user;
	struct mmu_interval_notifier notifier;
	spinlock_t notifier_lock;
	bool armed;
	struct edu_bo *status;
	void *vaddr;
	bool readonly_map;
	unsigned long zone_dma_pages;
	u64 bounced;
	struct dma_buf *import_buf;
	struct dma_buf_attachment *attach;
};

/* A userptr BO whose range changed under it: the pages it pins are no longer the range's. */
static inline bool edu_bo_invalidated(struct edu_bo *bo)
{
	return READ_ONCE(bo->flags) & DRM_EDU_ACCEL_BO_INFO_INVALIDATED;
}

static inline struct edu_bo *to_edu_bo(struct drm_gem_object *obj)
{
	return container_of(obj, struct edu_bo, base);
}

/* Upper bound of one BO; keeps page counts well inside int for pin_user_pages_fast(). */
#define EDU_MAX_BO_SIZE		SZ_1G

struct edu_bo *edu_bo_create(struct edu_accel_device *edev, struct edu_client *client,
			     u64 size, bool readonly_map);
struct edu_bo *edu_bo_lookup(struct drm_file *file, u32 handle);

void edu_bo_unmap_all(struct edu_accel_device *edev);

/* Device-writable mappings one page may start at once (DMA-API debugging counts 1 + 7). */
#define EDU_MAX_WRITE_MAPPINGS	8

bool edu_bo_sync(struct edu_accel_device *edev, struct edu_bo *bo, u64 off, u64 len, bool for_cpu);

/* Whether handing a range of @bo to the device or back moves bytes (process context only). */
static inline bool edu_bo_needs_sync(const struct edu_bo *bo)
{
	return bo->need_sync;
}

int edu_bo_claim_write_mappings(struct edu_accel_device *edev, struct edu_bo *bo);
void edu_bo_release_write_mappings(struct edu_accel_device *edev, struct edu_bo *bo);

struct edu_bo *edu_bo_import_mapped(struct edu_accel_device *edev, struct edu_client *client,
				    struct dma_buf *buf, struct dma_buf_attachment *attach,
				    struct sg_table *sgt);
int edu_bo_mmap_prepare(struct edu_bo *bo, struct vm_area_struct *vma);
extern const struct vm_operations_struct edu_bo_vm_ops;

/* edu_accel_prime.c */
struct dma_buf *edu_bo_export(struct drm_gem_object *obj, int flags);
struct drm_gem_object *edu_gem_prime_import(struct drm_device *drm, struct dma_buf *buf);
int edu_prime_fd_to_handle(struct drm_device *drm, struct drm_file *file, int fd, u32 *handle);
void edu_bo_import_detach(struct edu_bo *bo);

int edu_ioctl_bo_create(struct drm_device *drm, void *data, struct drm_file *file);
int edu_ioctl_bo_userptr(struct drm_device *drm, void *data, struct drm_file *file);
int edu_ioctl_bo_info(struct drm_device *drm, void *data, struct drm_file *file);

#endif /* EDU_ACCEL_GEM_H */
