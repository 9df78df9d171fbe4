// SPDX-License-Identifier: GPL-2.0
/*
 * edu_accel register access: identification, liveness, interrupts and the DMA engine.
 */
#include <drm/drm_print.h>
#include <linux/io.h>
#include <linux/iopoll.h>
#include <linux/random.h>

#include "edu_accel_drv.h"
#include "edu_accel_engine.h"
#include "edu_accel_hw.h"

static u32 edu_rd(struct edu_accel_device *edev, u32 reg)
{
	return readl(edev->regs + reg);
}

static void edu_wr(struct edu_accel_device *edev, u32 reg, u32 val)
{
	writel(val, edev->regs + reg);
}

/* A 4-byte write to the upper half of a DMA register is ignored by edu: always writeq. */
static void edu_wr64(struct edu_accel_device *edev, u32 reg, u64 val)
{
	writeq(val, edev->regs + reg);
}

/**
 * edu_hw_init - identify the device and check that it answers
 * @edev: the device, with BAR0 mapped
 *
 * Return: 0, or -ENODEV when the ID or the liveness register is wrong.
 */
int edu_hw_init(struct edu_accel_device *edev)
{
	u32 id = edu_rd(edev, EDU_REG_ID);
	u32 probe = get_random_u32();
	u32 back;

	if ((id & EDU_ID_MAGIC_MASK) != EDU_ID_MAGIC) {
		drm_err(&edev->drm, "unexpected ID register 0x%08x\n", id);
		return -ENODEV;
	}
	edu_wr(edev, EDU_REG_LIVENESS, probe);
	back = edu_rd(edev, EDU_REG_LIVENESS);
	if (back != ~probe) {
		drm_err(&edev->drm, "liveness check failed: wrote 0x%08x, read 0x%08x\n",
			probe, back);
		return -ENODEV;
	}
	drm_info(&edev->drm, "edu rev %u.%u, liveness ok\n", id >> 24, (id >> 16) & 0xff);
	return 0;
}

/**
 * edu_hw_irq_status - read and acknowledge what the device raised (hard interrupt context)
 * @edev: the device
 *
 * Safe on a shared INTx line: it acknowledges only what this device raised.
 *
 * Return: the EDU_IRQ_* bits raised (0: nothing, another device's interrupt), or
 * %EDU_IRQ_GONE when the device reads all-ones (it left the bus: nothing is acknowledged).
 */
u32 edu_hw_irq_status(struct edu_accel_device *edev)
{
	u32 status = edu_rd(edev, EDU_REG_IRQ_STATUS);

	if (!status || status == EDU_IRQ_GONE)
		return status;
	edu_wr(edev, EDU_REG_IRQ_ACK, status);
	atomic64_inc(&edev->irq_count);
	if (status & EDU_IRQ_DMA)
		atomic64_inc(&edev->dma_count);
	return status;
}

static void edu_program(struct edu_accel_device *edev, dma_addr_t ram, u32 dev_off, u32 len,
			bool to_ram)
{
	u64 dev_addr = EDU_DEV_BUF_ADDR + dev_off;

	edu_wr64(edev, EDU_REG_DMA_SRC, to_ram ? dev_addr : ram);
	edu_wr64(edev, EDU_REG_DMA_DST, to_ram ? ram : dev_addr);
	edu_wr64(edev, EDU_REG_DMA_COUNT, len);
	edu_wr64(edev, EDU_REG_DMA_CMD, EDU_DMA_CMD_START | EDU_DMA_CMD_IRQ |
		 (to_ram ? EDU_DMA_CMD_TO_RAM : 0));
}

/**
 * edu_hw_start_xfer - program one transfer of a job; its end raises EDU_IRQ_DMA
 * @edev: the device
 * @x: the transfer, already validated against the device buffer and the DMA mask
 *
 * Called with the engine lock held.
 */
void edu_hw_start_xfer(struct edu_accel_device *edev, const struct edu_xfer *x)
{
	edu_program(edev, x->ram, x->dev_off, x->len, x->to_ram);
}

/**
 * edu_hw_wait_idle - wait until no DMA transfer runs
 * @edev: the device
 * @timeout_us: how long to wait
 * @cmd: out, the last value of the command register
 *
 * Return: 0, or -ETIMEDOUT.
 */
int edu_hw_wait_idle(struct edu_accel_device *edev, u64 timeout_us, u32 *cmd)
{
	if (READ_ONCE(edev->fault_stuck_dma)) {
		fsleep(timeout_us);
		*cmd = EDU_DMA_CMD_START;
		return -ETIMEDOUT;
	}
	return readl_poll_timeout(edev->regs + EDU_REG_DMA_CMD, *cmd,
				  !(*cmd & EDU_DMA_CMD_START), 1000, timeout_us);
}

/**
 * edu_hw_raise_irq - make the device raise an interrupt with @status (fault injection)
 * @edev: the device
 * @status: EDU_IRQ_* bits
 */
void edu_hw_raise_irq(struct edu_accel_device *edev, u32 status)
{
	edu_wr(edev, EDU_REG_IRQ_RAISE, status);
}

/**
 * edu_hw_dma_idle - whether no DMA transfer runs (false for a device that reads all-ones)
 * @edev: the device
 *
 * Return: true when the device's start bit is clear.
 */
bool edu_hw_dma_idle(struct edu_accel_device *edev)
{
	if (READ_ONCE(edev->fault_stuck_dma))
		return false;
	return !(edu_rd(edev, EDU_REG_DMA_CMD) & EDU_DMA_CMD_START);
}
