// In-VM benchmark: pinning 64 MiB for the device (BO_USERPTR + GEM_CLOSE: pin, SG table,
// DMA map, and the reverse) against mlock()+munlock() of the same, already faulted range,
// measured side by side in one run. Prints MiB/s of each and their ratio.
//
// Then scattered memory: 4 MiB of 4 KiB pages faulted in reverse order (no THP), so every
// page is its own scatter-gather entry, registered many times: the median and 99th
// percentile of one registration (+ close), and a writable registration against a READONLY
// one of the same pages side by side. Writable mappings of user pages are what the driver's
// overlap counter tracks (edu_accel_overlap.c); READONLY ones it skips, so the ratio shows
// what that bookkeeping costs per page.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"

using namespace edu_test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kBytes = 64u << 20;

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

constexpr size_t kScattered = 4u << 20;
constexpr size_t kPage = 4096;

// Registration + close of the scattered range, in microseconds, `n` times; empty on failure.
std::vector<double> register_times(int fd, void* p, uint32_t flags, int n, uint32_t* sg_nents) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    uint32_t h = 0;
    const auto t0 = Clock::now();
    if (bo_userptr(fd, p, kScattered, flags, &h)) return {};
    if (i == 0) {
      drm_edu_accel_bo_info info;
      if (bo_info(fd, h, &info) == 0) *sg_nents = info.sg_nents;
    }
    if (gem_close(fd, h)) return {};
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

int scattered(int fd, int rounds, const char* suffix) {
  void* p = mmap(nullptr, kScattered, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return std::fprintf(stderr, "mmap failed\n"), 1;
  madvise(p, kScattered, MADV_NOHUGEPAGE);
  for (size_t off = kScattered; off > 0; off -= kPage) static_cast<volatile char*>(p)[off - kPage] = 1;
  uint32_t sg = 0, sg_ro = 0;
  std::vector<double> w, r;
  // Interleaved, so that both sides see the same machine.
  for (int i = 0; i < rounds; ++i) {
    auto a = register_times(fd, p, 0, 10, &sg);
    auto b = register_times(fd, p, DRM_EDU_ACCEL_BO_USERPTR_READONLY, 10, &sg_ro);
    if (a.empty() || b.empty()) return std::fprintf(stderr, "scattered registration failed\n"), 1;
    w.insert(w.end(), a.begin(), a.end());
    r.insert(r.end(), b.begin(), b.end());
  }
  const double med = percentile(w, 0.5), p99 = percentile(w, 0.99);
  std::printf("METRIC reg_scattered_sg_entries%s %u count\n", suffix, sg);
  std::printf("METRIC reg_scattered_4MiB_median_us%s %.1f us\n", suffix, med);
  std::printf("METRIC reg_scattered_4MiB_p99_us%s %.1f us\n", suffix, p99);
  std::printf("METRIC reg_scattered_p99_over_median%s %.2f ratio\n", suffix, p99 / med);
  std::printf("METRIC reg_write_vs_readonly_ratio%s %.3f ratio\n", suffix, med / percentile(r, 0.5));
  munmap(p, kScattered);
  return 0;
}

// The slowest round against the median one (1.0: no stall), of the last median_mib_s.
double g_slowest_over_median = 0;

template <typename F>
double median_mib_s(int rounds, F once) {
  if (!once()) return -1;  // warm-up: the first round pays for first-time allocations
  std::vector<double> rates;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    if (!once()) return -1;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(kBytes) / (1 << 20) / s);
  }
  std::sort(rates.begin(), rates.end());
  g_slowest_over_median = rates[rates.size() / 2] / rates.front();
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const char* suffix = argc > 2 ? argv[2] : "";
  const auto nodes = hostrt::detail::bound_edu_nodes();
  if (nodes.empty()) return std::fprintf(stderr, "no edu_accel device\n"), 1;
  Fd fd(nodes[0].render);
  void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fd.get() < 0 || p == MAP_FAILED) return std::fprintf(stderr, "setup failed\n"), 1;
  std::memset(p, 1, kBytes);  // fault everything in first: both sides then pin resident pages

  int pin_err = 0;
  const double pin = median_mib_s(rounds, [&] {
    uint32_t h = 0;
    pin_err = bo_userptr(fd.get(), p, kBytes, 0, &h);
    return pin_err == 0 && gem_close(fd.get(), h) == 0;
  });
  const double pin_slowest = g_slowest_over_median;
  const double lock = median_mib_s(rounds, [&] { return mlock(p, kBytes) == 0 && munlock(p, kBytes) == 0; });
  if (pin <= 0 || lock <= 0)
    return std::fprintf(stderr, "pin (%s) or mlock failed\n", pin_err ? std::strerror(pin_err) : "ok"), 1;
  std::printf("METRIC pin_mib_s%s %.1f MiB/s\n", suffix, pin);
  std::printf("METRIC mlock_mib_s%s %.1f MiB/s\n", suffix, lock);
  std::printf("METRIC pin_vs_mlock_ratio%s %.3f ratio\n", suffix, pin / lock);
  // Back-to-back 64 MiB registrations under an IOMMU may outrun its lazy IOVA flush.
  std::printf("METRIC pin_64MiB_slowest_over_median%s %.2f ratio\n", suffix, pin_slowest);
  munmap(p, kBytes);
  return scattered(fd.get(), 2 * rounds, suffix);
}
