// SPDX-License-Identifier: GPL-2.0
/* Compiles when a device's swiotlb pool is one range, io_tlb_mem's start and end (6.1-6.5). */
#include <linux/device.h>
#include <linux/module.h>
#include <linux/swiotlb.h>

phys_addr_t edu_probe(struct device *dev);
phys_addr_t edu_probe(struct device *dev)
{
	return dev->dma_io_tlb_mem->end - dev->dma_io_tlb_mem->start;
}
MODULE_LICENSE("GPL");
