// In-VM benchmark: pinning 64 MiB for the device (BO_USERPTR + GEM_CLOSE: pin, SG table,
// DMA map, and the reverse) against mlock()+munlock() of the same, already faulted range,
// measured side by side in one run. Prints MiB/s of each and their ratio.
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

template <typename F>
double median_mib_s(int rounds, F once) {
  std::vector<double> rates;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    if (!once()) return -1;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(kBytes) / (1 << 20) / s);
  }
  std::sort(rates.begin(), rates.end());
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
  const double lock = median_mib_s(rounds, [&] { return mlock(p, kBytes) == 0 && munlock(p, kBytes) == 0; });
  if (pin <= 0 || lock <= 0)
    return std::fprintf(stderr, "pin (%s) or mlock failed\n", pin_err ? std::strerror(pin_err) : "ok"), 1;
  std::printf("METRIC pin_mib_s%s %.1f MiB/s\n", suffix, pin);
  std::printf("METRIC mlock_mib_s%s %.1f MiB/s\n", suffix, lock);
  std::printf("METRIC pin_vs_mlock_ratio%s %.3f ratio\n", suffix, pin / lock);
  return 0;
}
