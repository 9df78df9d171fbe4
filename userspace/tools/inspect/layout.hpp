// One inspected buffer (its three views: pagemap, debugfs, BO_INFO), how it is printed, and
// the arithmetic that ties a copy's transfers to it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "inspect/probe.hpp"

namespace inspect {

struct BoInfo {
  bool ok = false;
  std::uint32_t flags = 0, sg_nents = 0, dma_nents = 0;
  std::uint64_t size = 0;
};

// The DMA API's own record of one buffer (dma-api/dump): its device's entries inside the
// buffer's DMA segments, in the segments' order.
struct DmaApiView {
  std::string device;  // the PCI name the dump is filtered by
  std::vector<DmaApiEntry> entries;
  std::size_t others = 0;  // the device's entries elsewhere (other buffers, coherent memory)
};

struct Buffer {
  std::string name;  // "userptr" or "bo"
  std::uint64_t virt = 0;
  std::uint64_t size = 0;
  std::uint32_t handle = 0;
  std::uint64_t limit = 0;  // physical addresses edu cannot be given (no IOMMU), 0: none
  std::vector<PfnRun> pfns;
  BoLayout bo;  // empty when debugfs had no line for it
  BoInfo info;
  std::optional<DmaApiView> dma_api;  // only on a kernel with CONFIG_DMA_API_DEBUG
  // Offset of buffer byte 0 in the BO's scatter-gather space (the user address's offset in
  // its first page for userptr).
  std::uint64_t sg_base() const { return bo.offset; }
  bool dma_equals_phys() const;
  std::uint64_t max_dma_segment() const;
  std::uint64_t dma_end() const;  // one past the highest DMA address
};

std::string human(std::uint64_t bytes);
// full: every run and segment, else the first 8 and the last 2 of a long list.
void print_layout(const Buffer& b, bool full);

// Transfers a H2H copy of n bytes from src to dst takes, as the engine cuts it: 4095-byte
// chunks, each load and store split again where a DMA segment ends.
std::uint64_t predict_h2h(const Buffer& src, const Buffer& dst, std::uint64_t n);
// Buffer offset of DMA address a (IOVA, bus or bounce address) in b, or -1.
std::int64_t dma_to_offset(const Buffer& b, std::uint64_t a);

// Physical runs merged regardless of how they were split (SG entries stop at the max
// segment), in order: the form in which pagemap and the SG table must agree.
std::vector<Range> merged(const std::vector<Range>& runs);
std::vector<Range> pfn_ranges(const Buffer& b);

// The entries of `all` (one device's, sorted by DMA address) inside b's DMA segments.
DmaApiView dma_api_view(const Buffer& b, const std::string& device, const std::vector<DmaApiEntry>& all);
// Whether the DMA API's record agrees with the driver's: covered, every DMA segment is exactly
// tiled by entries (address and size) and no entry reaches outside one; phys, each entry's
// page is the SG entry of the same index (debug_dma_map_sg() records mapped entry i with
// sg_page() of SG entry i), a frame pagemap shows for the buffer.
struct DmaApiAgreement {
  bool covered = false, phys = false;
  std::uint64_t bytes = 0;
};
DmaApiAgreement dma_api_agreement(const Buffer& b);

}  // namespace inspect
