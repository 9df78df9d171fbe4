// In-VM benchmark of the DMA engine and its completion paths:
//  - engine utilization: bytes moved per second of guest time while a queue is kept full,
//    over the device's limit of 4095 bytes per 100 ms;
//  - transfers per MiB of an H2H copy against the minimum 2 * ceil(bytes / 4095);
//  - submit-to-complete time of a 1-byte job beyond the device's own 100 ms;
//  - a completion query (a read of the completion page) against a syncobj wait ioctl on an
//    already signalled point.
// Under icount the guest clock is virtual, so device-bound figures are exact and CPU-bound
// ones count emulated instructions: compare within one run only.
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"

using namespace edu_test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kChunk = 4095;
constexpr double kDeviceBytesPerSec = 4095 / 0.1;

uint64_t deadline_ns(double s) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec) +
         static_cast<uint64_t>(s * 1e9);
}

struct Bench {
  int fd;
  hostrt::detail::EduNode node;
  uint32_t queue = 0;
  const volatile drm_edu_accel_completion* slot = nullptr;

  bool init() {
    drm_edu_accel_queue_create q;
    if (queue_create(fd, &q)) return false;
    const unsigned char* page = map_completion_page(fd);
    if (!page) return false;
    queue = q.queue;
    slot = reinterpret_cast<const volatile drm_edu_accel_completion*>(page + q.completion_offset);
    return true;
  }

  uint64_t transfers() const {
    auto t = hostrt::detail::read_text(node.debugfs + "/engine");
    auto v = t ? hostrt::detail::field(*t, "transfers") : std::nullopt;
    return v ? std::stoull(*v) : 0;
  }

  bool wait(uint32_t h) {
    return drmSyncobjWait(fd, &h, 1, static_cast<int64_t>(deadline_ns(3600)), DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL,
                          nullptr) == 0;
  }

  bool run(const std::vector<drm_edu_accel_copy_op>& ops, uint32_t out = 0) {
    drm_edu_accel_sync s = sync_point(out);
    return submit(fd, queue, ops.data(), static_cast<uint32_t>(ops.size()), nullptr, 0, out ? &s : nullptr,
                  out ? 1 : 0) == 0;
  }
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string suffix = argc > 1 ? argv[1] : "";
  // Without icount each DMA takes 100 ms of real time: fewer jobs, a smaller copy.
  const int jobs = argc > 2 ? std::atoi(argv[2]) : 8;
  const uint64_t h2h_bytes = argc > 3 ? std::stoull(argv[3]) : 1 << 20;
  const auto nodes = hostrt::detail::bound_edu_nodes();
  if (nodes.empty()) return std::fprintf(stderr, "no edu_accel device\n"), 1;
  Fd fd(nodes[0].render);
  Bench b{fd.get(), nodes[0]};
  uint32_t src = 0, dst = 0, done = 0;
  uint64_t off = 0;
  if (fd.get() < 0 || !b.init() || bo_create(fd.get(), 1 << 20, &src, &off) ||
      bo_create(fd.get(), 1 << 20, &dst, &off) || drmSyncobjCreate(fd.get(), 0, &done))
    return std::fprintf(stderr, "setup failed\n"), 1;

  // 1. Utilization: 8 jobs of 64 full-size H2D transfers, all queued before the first ends.
  {
    std::vector<drm_edu_accel_copy_op> ops(64, op(DRM_EDU_ACCEL_OP_H2D, src, 0, 0, 0, kChunk));
    const uint64_t x0 = b.transfers();
    const auto t0 = Clock::now();
    for (int j = 0; j < jobs; ++j)
      if (!b.run(ops, j == jobs - 1 ? done : 0)) return std::fprintf(stderr, "submit failed\n"), 1;
    if (!b.wait(done)) return 1;
    const double s = seconds_since(t0);
    const double bytes = static_cast<double>(jobs) * 64 * kChunk;
    std::printf("METRIC engine_utilization%s %.3f ratio\n", suffix.c_str(), bytes / s / kDeviceBytesPerSec);
    std::printf("METRIC engine_transfers%s %llu count\n", suffix.c_str(),
                static_cast<unsigned long long>(b.transfers() - x0));
  }

  // 2. Transfers for an H2H copy between driver BOs (per MiB), against the minimum.
  {
    const uint64_t n = h2h_bytes;
    const double per_mib = static_cast<double>(1 << 20) / static_cast<double>(n);
    const uint64_t x0 = b.transfers();
    if (!b.run({op(DRM_EDU_ACCEL_OP_H2H, src, 0, dst, 0, n)}, done) || !b.wait(done)) return 1;
    const uint64_t minimum = 2 * ((n + kChunk - 1) / kChunk);
    std::printf("METRIC h2h_transfers_per_mib%s %.0f count\n", suffix.c_str(),
                static_cast<double>(b.transfers() - x0) * per_mib);
    std::printf("METRIC h2h_transfers_min_per_mib%s %.0f count\n", suffix.c_str(),
                static_cast<double>(minimum) * per_mib);
  }

  // 3. Submit to complete of a 1-byte job; the device alone takes 100 ms of guest time.
  {
    std::vector<double> ms;
    for (int i = 0; i < (jobs < 8 ? 5 : 9); ++i) {
      const auto t0 = Clock::now();
      if (!b.run({op(DRM_EDU_ACCEL_OP_H2D, src, 0, 0, 0, 1)}, done) || !b.wait(done)) return 1;
      ms.push_back(seconds_since(t0) * 1e3);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("METRIC one_byte_job_ms%s %.2f ms\n", suffix.c_str(), ms[ms.size() / 2]);
    std::printf("METRIC one_byte_job_overhead_ms%s %.2f ms\n", suffix.c_str(), ms[ms.size() / 2] - 100.0);
  }

  // 4. "Has it completed?" by memory read against a syncobj wait on a signalled point.
  {
    const int reads = 1000000, waits = 2000;
    uint64_t sink = 0;
    auto t0 = Clock::now();
    for (int i = 0; i < reads; ++i) sink += b.slot->completed;
    const double read_ns = seconds_since(t0) * 1e9 / reads;
    t0 = Clock::now();
    for (int i = 0; i < waits; ++i)
      if (drmSyncobjWait(fd.get(), &done, 1, 0, DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, nullptr)) return 1;
    const double wait_ns = seconds_since(t0) * 1e9 / waits;
    std::printf("METRIC completion_read_ns%s %.1f ns\n", suffix.c_str(), read_ns);
    std::printf("METRIC syncobj_wait_ns%s %.1f ns\n", suffix.c_str(), wait_ns);
    std::printf("METRIC syncobj_wait_over_read%s %.1f ratio\n", suffix.c_str(), wait_ns / read_ns);
    if (sink == 1) std::printf("\n");  // keeps the reads
  }
  return 0;
}
