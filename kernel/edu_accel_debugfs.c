// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs under /sys/kernel/debug/dri/<minor>/:
 *   state     - identification, interrupt mode, DMA mask, counters, pinned totals
 *   pins      - per open file (and per file whose BOs outlive it): pinned bytes
 *   bos       - every BO with its CPU scatter-gather runs and DMA segments (root only:
 *               physical and bus addresses)
 *   engine    - DMA engine counters and the jobs it holds
 *   queues    - every queue of every open file: submitted, completed, failed
 *   fault_drop_irqs - write N: the next N DMA interrupts are ignored (tests job timeouts)
 *   fault_raise_irqs - write N: the device raises N stray DMA interrupts now (tests that an
 *               interrupt only ends the transfer it belongs to)
 *   fault_submit_delay_ms - write N: SUBMIT sleeps N ms after queueing its job (tests that
 *               it reads nothing of the job then: the job may already be freed)
 *   fault_pin_delay_ms - write N: BO_USERPTR sleeps N ms between checking the range's
 *               mappings and pinning it (tests that the pinned pages are checked too)
 *   fault_stuck_dma - write 1: the device reports its transfer running forever and its
 *               interrupts are ignored (tests the wedge path; rebind the driver after)
 *   fault_selftest_stray_irq - write 1: the self test raises a stray DMA interrupt as it
 *               starts each transfer (tests that only the transfer's end completes it)
 *   selftest  - reading it runs one DMA round trip RAM -> device -> RAM and verifies it
 */
#include <drm/drm_debugfs.h>
#include <drm/drm_drv.h>
#include <drm/drm_file.h>
#include <linux/debugfs.h>
#include <linux/dma-mapping.h>
#include <linux/ktime.h>
#include <linux/random.h>
#include <linux/seq_file.h>

#include <uapi/drm/edu_accel.h>

#include "edu_accel_drv.h"
#include "edu_accel_gem.h"
#include "edu_accel_hw.h"

static int state_show(struct seq_file *m, void *unused)
{
	struct edu_accel_device *edev = m->private;

	seq_printf(m, "pci: %s\n", pci_name(edev->pdev));
	seq_printf(m, "irq: %s\n", edev->irq_is_msi ? "msi" : "intx");
	seq_printf(m, "dma_bits: %u\n", edev->dma_bits);
	seq_printf(m, "iommu: %s\n", edev->iommu ? "yes" : "no");
	seq_printf(m, "max_segment: %u\n", dma_get_max_seg_size(&edev->pdev->dev));
	seq_printf(m, "pinned_bytes: %lld\n", atomic64_read(&edev->pinned_bytes));
	if (edev->bounce_limit != U64_MAX)
		seq_printf(m, "bounced_bytes: %lld of %llu\n", atomic64_read(&edev->bounced_bytes),
			   edev->bounce_limit);
	seq_printf(m, "dma_transfers: %lld\n", atomic64_read(&edev->dma_count));
	seq_printf(m, "irqs: %lld\n", atomic64_read(&edev->irq_count));
	seq_printf(m, "engine: %s\n", READ_ONCE(edev->engine.wedged) ? "wedged" :
		   READ_ONCE(edev->engine.lost) ? "lost" : "ok");
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(state);

/* Engine counters and the jobs it holds, oldest (running) first. */
static int engine_show(struct seq_file *m, void *unused)
{
	struct edu_accel_device *edev = m->private;
	struct edu_engine *e = &edev->engine;
	struct edu_job *job;
	u64 busy_ns;

	spin_lock_irq(&e->lock);
	busy_ns = e->busy_ns + (e->busy ? ktime_to_ns(ktime_sub(ktime_get(), e->busy_since)) : 0);
	seq_printf(m, "busy: %s\n", e->busy ? "yes" : "no");
	seq_printf(m, "jobs_done: %llu\n", e->jobs_done);
	seq_printf(m, "jobs_failed: %llu\n", e->jobs_failed);
	seq_printf(m, "scrubs: %llu\n", e->scrubs);
	seq_printf(m, "transfers: %llu\n", e->xfers);
	seq_printf(m, "bytes: %llu\n", e->bytes);
	seq_printf(m, "busy_ns: %llu\n", busy_ns);
	seq_printf(m, "drop_irqs: %d\n", atomic_read(&e->drop_irqs));
	list_for_each_entry(job, &e->jobs, engine_link)
		seq_printf(m, "job queue=%u seqno=%llu op=%u/%u done=%llu%s\n", job->queue->id,
			   job->seqno, job->cur_op, job->nops, job->done,
			   job->error ? " (failing)" : "");
	spin_unlock_irq(&e->lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(engine);

/* Every queue of every open file: last submitted and completed sequence numbers. */
static int queues_show(struct seq_file *m, void *unused)
{
	struct edu_accel_device *edev = m->private;
	struct drm_file *file;

	static const char * const prio[] = {
		[DRM_EDU_ACCEL_QUEUE_PRIORITY_LOW] = "low",
		[DRM_EDU_ACCEL_QUEUE_PRIORITY_NORMAL] = "normal",
		[DRM_EDU_ACCEL_QUEUE_PRIORITY_HIGH] = "high",
	};

	seq_puts(m, "client queue  submitted  completed     failed error priority\n");
	mutex_lock(&edev->drm.filelist_mutex);
	list_for_each_entry(file, &edev->drm.filelist, lhead) {
		struct edu_file *ef = file->driver_priv;
		struct edu_queue *q;
		unsigned long id;

		mutex_lock(&ef->lock);
		xa_for_each(&ef->queues, id, q)
			seq_printf(m, "%6llu %5u %10llu %10llu %10llu %5d %s\n", ef->client->id,
				   q->id, q->next_seqno, READ_ONCE(q->slot->completed),
				   READ_ONCE(q->slot->failed), READ_ONCE(q->slot->error),
				   prio[q->priority]);
		mutex_unlock(&ef->lock);
	}
	mutex_unlock(&edev->drm.filelist_mutex);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(queues);

static int clients_show(struct seq_file *m, void *unused)
{
	struct edu_accel_device *edev = m->private;
	struct edu_client *c;

	seq_puts(m, "client      tgid command          pinned_bytes\n");
	mutex_lock(&edev->obj_lock);
	list_for_each_entry(c, &edev->clients, link)
		seq_printf(m, "%6llu %9d %-16s %12lld\n", c->id, c->tgid, c->comm,
			   atomic64_read(&c->pinned_bytes));
	mutex_unlock(&edev->obj_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(clients);

/* The BO's GEM handles, in every open file (a BO has one per file that holds it). */
static void edu_bo_show_handles(struct seq_file *m, struct drm_device *drm, struct edu_bo *bo)
{
	struct drm_gem_object *obj;
	struct drm_file *file;
	bool any = false;
	int id;

	lockdep_assert_held(&drm->filelist_mutex);
	list_for_each_entry(file, &drm->filelist, lhead) {
		spin_lock(&file->table_lock);
		idr_for_each_entry(&file->object_idr, obj, id) {
			if (obj == &bo->base) {
				seq_printf(m, "%s%d", any ? "," : "", id);
				any = true;
			}
		}
		spin_unlock(&file->table_lock);
	}
	if (!any)
		seq_puts(m, "-");
}

static const char *edu_bo_kind(const struct edu_bo *bo)
{
	if (bo->import_buf)
		return "import";
	return (bo->flags & DRM_EDU_ACCEL_BO_INFO_USERPTR) ? "userptr" : "create";
}

static void edu_bo_show(struct seq_file *m, struct drm_device *drm, struct edu_bo *bo)
{
	struct scatterlist *sg;
	int i;

	seq_printf(m, "bo client=%llu handle=", bo->client->id);
	edu_bo_show_handles(m, drm, bo);
	seq_printf(m, " user=0x%llx %s%s size=%llu offset=%u pages=%lu sg_nents=%u dma_nents=%u mapped=%d invalidated=%d need_sync=%d\n",
		   bo->user_ptr, edu_bo_kind(bo),
		   (bo->flags & DRM_EDU_ACCEL_BO_INFO_READONLY) ? ",readonly" : "", bo->size,
		   bo->offset, bo->npages, bo->sgt.orig_nents, bo->sgt.nents, bo->mapped,
		   edu_bo_invalidated(bo), bo->need_sync);
	/* An import's table is the exporter's: its CPU side is not ours to read. */
	for_each_sgtable_sg(bo->import_buf ? &(struct sg_table){} : &bo->sgt, sg, i)
		seq_printf(m, "  sg %d phys=%pa len=%u\n", i, &(phys_addr_t){ sg_phys(sg) },
			   sg->length);
	if (!bo->mapped)
		return;
	for_each_sgtable_dma_sg(&bo->sgt, sg, i)
		seq_printf(m, "  dma %d addr=%pad len=%u\n", i, &sg_dma_address(sg),
			   sg_dma_len(sg));
}

/* Lock order: the file list, then the BO list (neither is taken under the other elsewhere). */
static int bos_show(struct seq_file *m, void *unused)
{
	struct edu_accel_device *edev = m->private;
	struct edu_bo *bo;

	mutex_lock(&edev->drm.filelist_mutex);
	mutex_lock(&edev->obj_lock);
	list_for_each_entry(bo, &edev->bos, dev_link)
		edu_bo_show(m, &edev->drm, bo);
	mutex_unlock(&edev->obj_lock);
	mutex_unlock(&edev->drm.filelist_mutex);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(bos);

/*
 * One full-size transfer each way through coherent buffers: the smallest end-to-end proof
 * that addressing, the DMA engine and the interrupt path work.
 */
static int edu_selftest_run(struct edu_accel_device *edev, struct seq_file *m)
{
	struct device *dev = &edev->pdev->dev;
	const u32 len = EDU_MAX_XFER;
	dma_addr_t src_dma, dst_dma;
	u8 *src, *dst;
	ktime_t t0;
	s64 ns;
	int ret;

	src = dma_alloc_coherent(dev, EDU_DEV_BUF_SIZE, &src_dma, GFP_KERNEL);
	if (!src)
		return -ENOMEM;
	dst = dma_alloc_coherent(dev, EDU_DEV_BUF_SIZE, &dst_dma, GFP_KERNEL);
	if (!dst) {
		ret = -ENOMEM;
		goto free_src;
	}
	get_random_bytes(src, len);
	memset(dst, 0, len);

	t0 = ktime_get();
	ret = edu_engine_run_xfer(edev, &(struct edu_xfer){ .ram = src_dma, .len = len });
	if (!ret)
		ret = edu_engine_run_xfer(edev, &(struct edu_xfer){ .ram = dst_dma, .len = len,
								     .to_ram = true });
	ns = ktime_to_ns(ktime_sub(ktime_get(), t0));
	if (ret == -EBUSY) {
		/* The device may still write them: leaking two pages beats corrupting memory. */
		seq_puts(m, "FAIL transfer still running: buffers leaked\n");
		return ret;
	}
	if (ret)
		seq_printf(m, "FAIL dma error %d\n", ret);
	else if (memcmp(src, dst, len))
		seq_printf(m, "FAIL data mismatch after %u-byte round trip\n", len);
	else
		seq_printf(m, "PASS %u-byte round trip in %lld us\n", len, ns / 1000);

	dma_free_coherent(dev, EDU_DEV_BUF_SIZE, dst, dst_dma);
free_src:
	dma_free_coherent(dev, EDU_DEV_BUF_SIZE, src, src_dma);
	return ret;
}

static int selftest_show(struct seq_file *m, void *unused)
{
	struct edu_accel_device *edev = m->private;
	int idx, ret;

	if (!drm_dev_enter(&edev->drm, &idx))
		return -ENODEV;
	ret = edu_engine_reserve(edev);
	if (ret) {
		seq_puts(m, "SKIP engine busy with jobs\n");
		drm_dev_exit(idx);
		return 0;
	}
	ret = edu_selftest_run(edev, m);
	edu_engine_unreserve(edev);
	drm_dev_exit(idx);
	/* The verdict is in the text; an error code would hide it from cat. */
	return ret == -ENOMEM || ret == -ENODEV ? ret : 0;
}
DEFINE_SHOW_ATTRIBUTE(selftest);

static ssize_t fault_raise_irqs_write(struct file *f, const char __user *buf, size_t len,
				      loff_t *pos)
{
	struct edu_accel_device *edev = file_inode(f)->i_private;
	unsigned int n, i;
	int idx, ret;

	ret = kstrtouint_from_user(buf, len, 0, &n);
	if (ret)
		return ret;
	if (n > 1000)
		return -EINVAL;
	if (!drm_dev_enter(&edev->drm, &idx))
		return -ENODEV;
	for (i = 0; i < n; i++)
		edu_hw_raise_irq(edev, EDU_IRQ_DMA);
	drm_dev_exit(idx);
	return len;
}

static const struct file_operations fault_raise_irqs_fops = {
	.owner = THIS_MODULE,
	.open = simple_open,
	.write = fault_raise_irqs_write,
	.llseek = noop_llseek,
};

/**
 * edu_accel_debugfs_init - create the driver's files in a DRM minor's debugfs directory
 * @minor: the minor being registered; DRM removes the directory with it
 */
void edu_accel_debugfs_init(struct drm_minor *minor)
{
	struct edu_accel_device *edev = to_edu(minor->dev);

	debugfs_create_file("state", 0444, minor->debugfs_root, edev, &state_fops);
	debugfs_create_file("engine", 0444, minor->debugfs_root, edev, &engine_fops);
	debugfs_create_file("queues", 0444, minor->debugfs_root, edev, &queues_fops);
	debugfs_create_file("pins", 0444, minor->debugfs_root, edev, &clients_fops);
	debugfs_create_file("bos", 0400, minor->debugfs_root, edev, &bos_fops);
	debugfs_create_file("selftest", 0400, minor->debugfs_root, edev, &selftest_fops);
	if (!edu_test_mode)
		return;
	/* Fault injection: ignore the next N DMA interrupts (the job then times out). */
	debugfs_create_atomic_t("fault_drop_irqs", 0600, minor->debugfs_root,
				&edev->engine.drop_irqs);
	debugfs_create_file("fault_raise_irqs", 0200, minor->debugfs_root, edev,
			    &fault_raise_irqs_fops);
	debugfs_create_u32("fault_submit_delay_ms", 0600, minor->debugfs_root,
			   &edev->submit_delay_ms);
	debugfs_create_u32("fault_pin_delay_ms", 0600, minor->debugfs_root, &edev->pin_delay_ms);
	debugfs_create_bool("fault_selftest_stray_irq", 0600, minor->debugfs_root,
			    &edev->fault_selftest_stray_irq);
	debugfs_create_bool("fault_stuck_dma", 0600, minor->debugfs_root, &edev->fault_stuck_dma);
}
