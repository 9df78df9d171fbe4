/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Register interface of QEMU's edu device. This header and edu_accel_hw.c are the only code
 * that touches the device's registers.
 */
#ifndef EDU_ACCEL_HW_H
#define EDU_ACCEL_HW_H

#include <linux/types.h>

struct edu_accel_device;
struct edu_xfer;

#define EDU_REG_ID		0x00
#define   EDU_ID_MAGIC_MASK	0xff
#define   EDU_ID_MAGIC		0xed
#define EDU_REG_LIVENESS	0x04	/* reads back the bitwise inverse of the last write */
#define EDU_REG_STATUS		0x20
#define EDU_REG_IRQ_STATUS	0x24
#define EDU_REG_IRQ_RAISE	0x60
#define EDU_REG_IRQ_ACK		0x64
#define   EDU_IRQ_DMA		0x100	/* raised by a DMA started with EDU_DMA_CMD_IRQ */
#define   EDU_IRQ_GONE		0xffffffffU	/* all-ones: the device left the bus */
#define EDU_REG_DMA_SRC		0x80	/* 64-bit: written with writeq only */
#define EDU_REG_DMA_DST		0x88	/* 64-bit */
#define EDU_REG_DMA_COUNT	0x90	/* 64-bit */
#define EDU_REG_DMA_CMD		0x98
#define   EDU_DMA_CMD_START	0x1	/* cleared by the device when the transfer ends */
#define   EDU_DMA_CMD_TO_RAM	0x2	/* direction: device buffer -> RAM */
#define   EDU_DMA_CMD_IRQ	0x4	/* raise EDU_IRQ_DMA on completion */

/* The device's 4 KiB buffer, as seen in DMA addresses. */
#define EDU_DEV_BUF_ADDR	0x40000ULL
#define EDU_DEV_BUF_SIZE	4096U
/*
 * QEMU 7.2 aborts the whole VM on a transfer that ends exactly at the end of the buffer
 * (so on any 4096-byte transfer) and on a 0-byte one: transfers are 1..4095 bytes.
 */
#define EDU_MAX_XFER		(EDU_DEV_BUF_SIZE - 1)

int edu_hw_init(struct edu_accel_device *edev);
void edu_hw_start_xfer(struct edu_accel_device *edev, const struct edu_xfer *x);
bool edu_hw_dma_idle(struct edu_accel_device *edev);
void edu_hw_raise_irq(struct edu_accel_device *edev, u32 status);
int edu_hw_wait_idle(struct edu_accel_device *edev, u64 timeout_us, u32 *cmd);
u32 edu_hw_irq_status(struct edu_accel_device *edev);

#endif /* EDU_ACCEL_HW_H */
