// edu-inspect's moving parts: one copy's transfers and fences, and a pool block's reuse.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "hostrt/pool.hpp"
#include "inspect/inspect.hpp"

namespace inspect {

namespace {

constexpr std::uint64_t kPage = 4096;

// "userptr +4095 (phys 0x...)": where a device-visible address lands in the buffer.
std::string where(const Buffer& b, std::uint64_t addr) {
  const std::int64_t off = dma_to_offset(b, addr);
  if (off < 0) return "outside " + b.name + "!";
  char buf[96];
  const auto phys = phys_of(b.pfns, b.virt + static_cast<std::uint64_t>(off));
  std::snprintf(buf, sizeof buf, "%s +%" PRId64 " (phys 0x%" PRIx64 ")", b.name.c_str(), off,
                phys.value_or(0));
  return buf;
}

}  // namespace

void Inspector::copy() {
  std::printf("\n-- copy: %s from the user memory into the BO (hostrt H2H: one job on a new stream) --\n",
              human(o_.size).c_str());
  std::memset(user_, 0xc3, o_.size);
  TraceSession ts;
  hostrt::Stream s = dev_.create_stream();
  s.memcpy_async(alloc_.data(), user_, o_.size, hostrt::CopyKind::H2H);
  const std::uint64_t seq = s.last_submitted();
  const std::uint32_t queue = hostrt::detail::Access::core(s)->queue_id();
  s.synchronize();
  const bool reached = s.reached(seq);
  const bool same = std::memcmp(alloc_.data(), user_, o_.size) == 0;
  if (!ts.ok()) {
    std::printf("  (tracefs is not writable here: run as root to see the transfers)\n");
    return;
  }
  const auto xfers = ts.xfers(client_, queue, seq);
  const auto job = ts.job(client_, queue, seq);
  const std::uint64_t predicted = predict_h2h(ub_, bb_, o_.size);
  const std::uint64_t chunks = (o_.size + 4094) / 4095;
  std::printf(
      "  Transfers (tracepoint edu_accel:edu_xfer_start): %zu edu DMAs. One transfer moves at\n"
      "  most 4095 B through edu's 4 KiB buffer, so each of the %" PRIu64
      " chunks is loaded (ram->dev)\n"
      "  then stored (dev->ram), and split again where a DMA segment ends.\n",
      xfers.size(), chunks);
  std::printf("    predicted from the DMA segments above: %" PRIu64 " (2 x %" PRIu64 " chunks + %" PRIu64
              " splits at segment ends)\n",
              predicted, chunks, predicted - 2 * chunks);
  std::uint64_t moved = 0;
  bool inside = true, sizes = true;
  for (const auto& x : xfers) {
    const Buffer& b = x.to_ram ? bb_ : ub_;
    moved += x.len;
    sizes = sizes && x.len >= 1 && x.len <= 4095;
    inside = inside && dma_to_offset(b, x.ram) >= 0 && dma_to_offset(b, x.ram + x.len - 1) >= 0;
  }
  if (!xfers.empty()) {
    for (const auto* x : {&xfers.front(), &xfers.back()})
      std::printf("    %-5s %s addr 0x%09" PRIx64 " %4u B = %s\n", x == &xfers.front() ? "first" : "last",
                  x->to_ram ? "dev->ram" : "ram->dev", x->ram, x->len,
                  where(x->to_ram ? bb_ : ub_, x->ram).c_str());
  }
  std::printf("  Fence: job seqno %" PRIu64
              " on queue %u; finished fence %s (what syncobjs carry),\n"
              "  hardware fence %s signalled with error %d; completion page: point %" PRIu64 " reached %s\n",
              seq, queue, job.finished_fence.c_str(), job.hw_fence.c_str(), job.error, seq,
              reached ? "yes" : "no");
  std::printf("  Data: the BO %s the user memory after the copy\n", same ? "equals" : "DIFFERS FROM");
  std::printf("SUMMARY copy transfers=%zu predicted=%" PRIu64 " min=%" PRIu64 " bytes=%" PRIu64
              " first=0x%" PRIx64 " last=0x%" PRIx64 " seqno=%" PRIu64 " hw_fence=%s error=%d\n",
              xfers.size(), predicted, 2 * chunks, moved, xfers.empty() ? 0 : xfers.front().ram,
              xfers.empty() ? 0 : xfers.back().ram, seq, job.hw_fence.c_str(), job.error);
  check(xfers.size() == predicted, "copy: the transfers the trace shows are the ones the segments predict");
  check(moved == 2 * o_.size && sizes,
        "copy: every byte crossed the device twice, in transfers of 1..4095 B");
  check(inside, "copy: every transfer lies inside the DMA segments of its buffer");
  check(job.done && job.error == 0 && reached && same,
        "copy: the job's fence signalled without error, data equal");
  if (!o_.xlate.empty()) write_xlate(xfers);
}

// Each IOVA page the copy touched and the guest-physical page it must translate to.
void Inspector::write_xlate(const std::vector<Xfer>& xfers) {
  std::map<std::uint64_t, std::pair<std::uint64_t, const Buffer*>> pages;
  for (const auto& x : xfers) {
    const Buffer& b = x.to_ram ? bb_ : ub_;
    for (std::uint64_t a = x.ram; a < x.ram + x.len; a = (a & ~(kPage - 1)) + kPage) {
      const std::int64_t off = dma_to_offset(b, a);
      if (off < 0) continue;
      if (const auto phys = phys_of(b.pfns, b.virt + static_cast<std::uint64_t>(off)))
        pages[a & ~(kPage - 1)] = {*phys & ~(kPage - 1), &b};
    }
  }
  FILE* f = std::fopen(o_.xlate.c_str(), "w");
  if (!f) return;
  for (const auto& [iova, v] : pages)
    std::fprintf(f, "0x%" PRIx64 " 0x%" PRIx64 " %s\n", iova, v.first, v.second->name.c_str());
  std::fclose(f);
}

void Inspector::pool_demo() {
  constexpr std::size_t kBlock = 64 * 1024;
  std::printf(
      "\n-- pool: when hostrt::Pool hands a freed block out again (streams A and B) --\n"
      "  The host may write a block as soon as allocate() returns, so a block freed while a\n"
      "  copy still reads it must wait until the host has seen that copy end.\n");
  hostrt::PoolOptions opts;
  opts.thread_cache_bytes = 0;  // every free goes through the pool's decision, none cached
  hostrt::Pool pool(dev_, opts);
  hostrt::Stream a = dev_.create_stream(), b = dev_.create_stream();
  auto* x = static_cast<char*>(pool.allocate(kBlock, a));
  void* sink = pool.allocate(kBlock, a);
  std::memset(x, 0x42, kBlock);
  a.memcpy_async(sink, x, kBlock, hostrt::CopyKind::H2H);
  const std::uint64_t point = a.last_submitted();
  pool.deallocate(x, a);
  auto name = [&](void* p) {
    char buf[64];
    if (p == x)
      std::snprintf(buf, sizeof buf, "X itself (reused)");
    else
      std::snprintf(buf, sizeof buf, "a new block at X%+" PRId64 " KiB", (static_cast<char*>(p) - x) / 1024);
    return std::string(buf);
  };
  std::printf("  X = allocate(64 KiB, A) at %p; A copies X (job seqno %" PRIu64
              ", 64 KiB = 32 transfers);\n"
              "  deallocate(X, A) right after submitting\n",
              static_cast<void*>(x), point);
  const bool done_b = a.reached(point);
  void* on_b = pool.allocate(kBlock, b);
  std::printf("  allocate(64 KiB, B), A's copy done: %-3s -> %s\n", done_b ? "yes" : "no",
              name(on_b).c_str());
  const bool done_a = a.reached(point);
  void* on_a = pool.allocate(kBlock, a);
  std::printf(
      "  allocate(64 KiB, A), A's copy done: %-3s -> %s%s\n", done_a ? "yes" : "no", name(on_a).c_str(),
      on_a != x && !done_a ? "\n    (hostrt waits for the host to see the copy end even on A itself; CUDA's\n"
                             "    stream-ordered reuse would hand X back at once, ordered behind the copy)"
                           : "");
  a.synchronize();
  pool.synchronize();
  void* after = pool.allocate(kBlock, b);
  std::printf("  A.synchronize(), then allocate(64 KiB, B), A's copy done: yes -> %s\n", name(after).c_str());
  const hostrt::PoolStats st = pool.stats();
  std::printf("  pool stats: frees that had to wait %" PRIu64 ", reserved %s in %zu segment(s)\n",
              st.frees_waited, human(st.reserved_bytes).c_str(), st.segments);
  std::printf("SUMMARY pool to_b_early=%s to_a_early=%s copy_done_early=%s reused_after=%s\n",
              on_b == x ? "yes" : "no", on_a == x ? "yes" : "no", done_b || done_a ? "yes" : "no",
              after == x ? "yes" : "no");
  check((done_b || on_b != x) && (done_a || on_a != x),
        "pool: a block freed on A is not handed out (to B or A) before A's copy is seen complete");
  for (void* p : {sink, on_b, on_a, after}) pool.deallocate(p);
}

}  // namespace inspect
