#include "inspect/layout.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace inspect {

namespace {

constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t kMaxXfer = 4095;  // QEMU 7.2's edu aborts the VM on 4096

// How many DMA segments [off, off+len) of the SG space crosses.
std::uint64_t pieces(const std::vector<Range>& segs, std::uint64_t off, std::uint64_t len) {
  std::uint64_t base = 0, n = 0;
  for (const auto& s : segs) {
    if (off < base + s.len && off + len > base) ++n;
    base += s.len;
  }
  return n;
}

// Long lists (a BO's pages often come one frame at a time) shown as their head and tail.
bool elided(std::size_t i, std::size_t n, bool full) {
  constexpr std::size_t kHead = 8, kTail = 2;
  if (full || n <= kHead + kTail + 1 || i < kHead || i >= n - kTail) return false;
  if (i == kHead)
    std::printf("    ... %zu more (edu-inspect --full lists them all) ...\n", n - kHead - kTail);
  return true;
}

}  // namespace

std::string human(std::uint64_t bytes) {
  char buf[48];
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " MiB", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%" PRIu64 " KiB", bytes >> 10);
  else
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
  return buf;
}

bool Buffer::dma_equals_phys() const {
  if (bo.dma.size() != bo.sg.size()) return false;
  for (std::size_t i = 0; i < bo.dma.size(); ++i)
    if (bo.dma[i].addr != bo.sg[i].addr || bo.dma[i].len != bo.sg[i].len) return false;
  return true;
}

std::uint64_t Buffer::max_dma_segment() const {
  std::uint64_t m = 0;
  for (const auto& d : bo.dma) m = std::max(m, d.len);
  return m;
}

std::uint64_t Buffer::dma_end() const {
  std::uint64_t m = 0;
  for (const auto& d : bo.dma) m = std::max(m, d.end());
  return m;
}

std::vector<Range> merged(const std::vector<Range>& runs) {
  std::vector<Range> out;
  for (const auto& r : runs) {
    if (!out.empty() && out.back().end() == r.addr)
      out.back().len += r.len;
    else
      out.push_back(r);
  }
  return out;
}

std::vector<Range> pfn_ranges(const Buffer& b) {
  std::vector<Range> r;
  for (const auto& p : b.pfns) r.push_back({p.phys, p.len});
  return merged(r);
}

void print_layout(const Buffer& b, bool full) {
  std::printf(
      "  PFN runs (/proc/self/pagemap): which guest-physical page frames back the virtual\n"
      "  range; a run is consecutive virtual pages on consecutive frames.\n");
  for (std::size_t i = 0; i < b.pfns.size(); ++i) {
    if (elided(i, b.pfns.size(), full)) continue;
    const auto& r = b.pfns[i];
    std::printf("    run %-3zu virt 0x%012" PRIx64 "  phys 0x%09" PRIx64 "-0x%09" PRIx64 "  %8s (%" PRIu64
                " page%s)%s\n",
                i, r.virt, r.phys, r.phys + r.len - 1, human(r.len).c_str(), r.len / kPage,
                r.len == kPage ? "" : "s", b.limit && r.phys + r.len > b.limit ? "  above the DMA mask" : "");
  }
  if (b.bo.header.empty()) {
    std::printf("  (no entry in debugfs bos: not root, debugfs not mounted, or the BO is gone)\n");
    return;
  }
  std::printf(
      "  SG entries (debugfs bos): the driver's scatter-gather table, the same pages merged\n"
      "  into physically contiguous entries of at most the max segment size.\n");
  for (std::size_t i = 0; i < b.bo.sg.size(); ++i)
    if (!elided(i, b.bo.sg.size(), full))
      std::printf("    sg  %-3zu phys 0x%09" PRIx64 "  %8s\n", i, b.bo.sg[i].addr,
                  human(b.bo.sg[i].len).c_str());
  std::printf(
      "  DMA segments (debugfs bos): the addresses edu is programmed with. No IOMMU: the\n"
      "  physical address; intel-iommu: an IOVA; swiotlb: a bounce slot the kernel copies.\n");
  for (std::size_t i = 0; i < b.bo.dma.size(); ++i)
    if (!elided(i, b.bo.dma.size(), full))
      std::printf("    dma %-3zu addr 0x%09" PRIx64 "  %8s%s\n", i, b.bo.dma[i].addr,
                  human(b.bo.dma[i].len).c_str(),
                  i < b.bo.sg.size() && b.bo.dma[i].addr == b.bo.sg[i].addr ? "  (= physical)" : "");
  if (!b.bo.mapped) std::printf("    (not DMA-mapped)\n");
  if (b.dma_api) {
    const auto& v = *b.dma_api;
    std::printf(
        "  DMA API record (/sys/kernel/debug/dma-api/dump): the DMA API's own record of each mapping,\n"
        "  kept by CONFIG_DMA_API_DEBUG, independent of the driver's. Its entries for %s in the\n"
        "  segments above; phys: the page of the SG entry of the same index (\"scather\" [sic]):\n",
        v.device.c_str());
    for (std::size_t i = 0; i < v.entries.size(); ++i) {
      if (elided(i, v.entries.size(), full)) continue;
      const auto& e = v.entries[i];
      std::printf("    map %-3zu dma 0x%09" PRIx64 "  %8s  phys 0x%09" PRIx64 "  %s %s\n", i, e.dma,
                  human(e.len).c_str(), e.phys, e.type.c_str(), e.direction.c_str());
    }
    if (v.entries.empty()) std::printf("    (none: the DMA API has no record of these segments)\n");
    std::printf("  (%zu more of %s elsewhere: other buffers, the driver's coherent memory)\n", v.others,
                v.device.c_str());
  }
  std::printf(
      "  BO_INFO ioctl: what any process sees of its BO (no addresses): size %s, sg_nents %u,\n"
      "  dma_nents %u, flags 0x%x\n",
      human(b.info.size).c_str(), b.info.sg_nents, b.info.dma_nents, b.info.flags);
}

DmaApiView dma_api_view(const Buffer& b, const std::string& device, const std::vector<DmaApiEntry>& all) {
  DmaApiView v{device, {}, 0};
  std::vector<bool> taken(all.size());
  for (const auto& s : b.bo.dma)
    for (std::size_t i = 0; i < all.size(); ++i)
      if (!taken[i] && all[i].dma < s.end() && all[i].end() > s.addr) {
        taken[i] = true;
        v.entries.push_back(all[i]);
      }
  v.others = all.size() - v.entries.size();
  return v;
}

DmaApiAgreement dma_api_agreement(const Buffer& b) {
  DmaApiAgreement a;
  if (!b.dma_api || b.bo.dma.empty()) return a;
  const auto& es = b.dma_api->entries;
  a.covered = true;
  std::size_t inside = 0;
  for (const auto& s : b.bo.dma) {
    // The entries are sorted by DMA address within a segment: they must tile it end to end.
    std::uint64_t at = s.addr;
    for (const auto& e : es) {
      if (e.dma < s.addr || e.end() > s.end()) continue;
      ++inside;
      if (e.dma != at) a.covered = false;
      at = e.end();
    }
    if (at != s.end()) a.covered = false;
  }
  if (inside != es.size()) a.covered = false;
  for (const auto& e : es) a.bytes += e.len;

  const auto frames = pfn_ranges(b);
  auto in_pagemap = [&](std::uint64_t p) {
    return std::any_of(frames.begin(), frames.end(),
                       [&](const Range& r) { return p >= r.addr && p < r.end(); });
  };
  a.phys = !es.empty();
  for (std::size_t i = 0; i < es.size(); ++i) {
    const auto& e = es[i];
    const bool same_sg = es.size() == b.bo.dma.size() && i < b.bo.sg.size() && e.phys == b.bo.sg[i].addr;
    if (!same_sg || e.pfn != e.phys / kPage || !in_pagemap(e.phys)) a.phys = false;
  }
  return a;
}

std::uint64_t predict_h2h(const Buffer& src, const Buffer& dst, std::uint64_t n) {
  std::uint64_t total = 0;
  for (std::uint64_t at = 0; at < n; at += kMaxXfer) {
    const std::uint64_t chunk = std::min(kMaxXfer, n - at);
    total += pieces(src.bo.dma, src.sg_base() + at, chunk) + pieces(dst.bo.dma, dst.sg_base() + at, chunk);
  }
  return total;
}

std::int64_t dma_to_offset(const Buffer& b, std::uint64_t a) {
  std::uint64_t base = 0;
  for (const auto& s : b.bo.dma) {
    if (a >= s.addr && a < s.end())
      return static_cast<std::int64_t>(base + (a - s.addr)) - static_cast<std::int64_t>(b.sg_base());
    base += s.len;
  }
  return -1;
}

}  // namespace inspect
