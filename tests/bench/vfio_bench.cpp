// In-VM benchmark: registering scattered user memory with edu_accel (BO_USERPTR + GEM_CLOSE:
// pin, SG table, DMA map through the IOMMU, and the reverse) against VFIO type1's MAP_DMA +
// UNMAP_DMA of the same pages through the same IOMMU, the kernel's own baseline for "pin user
// memory and map it for a device". The second edu device is handed to vfio-pci for it (and
// given back at the end). An optional second argument suffixes the metric names. 4 KiB, 1 MiB and 64 MiB of 4
// KiB pages faulted in reverse order (no THP), so every page is its own scatter-gather entry; the two sides
// interleaved, round by round, on the same pages. Prints the medians, edu_accel's time over VFIO's per size,
// and the slowest registration over the median. Needs the iommu configuration, root, and `modprobe vfio-pci`
// first (tests/bench/run-bench.sh).
#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"

using namespace edu_test;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kPage = 4096;

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}
double median(const std::vector<double>& v) { return percentile(v, 0.5); }

// A VFIO container with one group (the device's) and the type1 IOMMU set.
class Vfio {
 public:
  explicit Vfio(const std::string& pci) { error_ = setup(pci); }
  ~Vfio() {
    if (group_ >= 0) close(group_);
    if (container_ >= 0) close(container_);
  }
  const std::string& error() const { return error_; }

  bool map(void* p, size_t n) {
    vfio_iommu_type1_dma_map m{};
    m.argsz = sizeof m;
    m.flags = VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE;
    m.vaddr = reinterpret_cast<uintptr_t>(p);
    m.iova = kIova;
    m.size = n;
    return ioctl(container_, VFIO_IOMMU_MAP_DMA, &m) == 0;
  }
  bool unmap(size_t n) {
    vfio_iommu_type1_dma_unmap u{};
    u.argsz = sizeof u;
    u.iova = kIova;
    u.size = n;
    return ioctl(container_, VFIO_IOMMU_UNMAP_DMA, &u) == 0;
  }

 private:
  std::string setup(const std::string& pci) {
    char link[256] = {};
    const std::string grp = "/sys/bus/pci/devices/" + pci + "/iommu_group";
    const ssize_t n = readlink(grp.c_str(), link, sizeof link - 1);
    if (n <= 0) return "no IOMMU group for " + pci;
    const std::string id = std::strrchr(link, '/') + 1;
    container_ = open("/dev/vfio/vfio", O_RDWR | O_CLOEXEC);
    group_ = open(("/dev/vfio/" + id).c_str(), O_RDWR | O_CLOEXEC);
    if (container_ < 0 || group_ < 0) return "cannot open /dev/vfio/vfio or group " + id;
    vfio_group_status st{};
    st.argsz = sizeof st;
    if (ioctl(group_, VFIO_GROUP_GET_STATUS, &st) || !(st.flags & VFIO_GROUP_FLAGS_VIABLE))
      return "group " + id + " is not viable (another device of it has a driver)";
    if (ioctl(group_, VFIO_GROUP_SET_CONTAINER, &container_) ||
        ioctl(container_, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU))
      return std::string("VFIO type1 setup: ") + std::strerror(errno);
    return {};
  }

  static constexpr uint64_t kIova = 1u << 20;
  int container_ = -1, group_ = -1;
  std::string error_;
};

// Hands the device to vfio-pci, and back to edu_accel when it goes.
class BoundToVfio {
 public:
  explicit BoundToVfio(std::string pci) : pci_(std::move(pci)) {
    const std::string dev = "/sys/bus/pci/devices/" + pci_;
    ok_ = write_sysfs("/sys/bus/pci/drivers/edu_accel/unbind", pci_) &&
          write_sysfs(dev + "/driver_override", "vfio-pci") &&
          write_sysfs("/sys/bus/pci/drivers_probe", pci_);
  }
  ~BoundToVfio() {
    const std::string dev = "/sys/bus/pci/devices/" + pci_;
    write_sysfs("/sys/bus/pci/drivers/vfio-pci/unbind", pci_);
    write_sysfs(dev + "/driver_override", "\n");
    write_sysfs("/sys/bus/pci/drivers_probe", pci_);
  }
  bool ok() const { return ok_; }

 private:
  std::string pci_;
  bool ok_ = false;
};

// The guest's local timer interrupts so far (/proc/interrupts "LOC:"), read outside the timed
// calls: a registration that saw one ran the tick's work too.
unsigned long long timer_interrupts() {
  FILE* f = std::fopen("/proc/interrupts", "r");
  if (f == nullptr) return 0;
  char line[512];
  unsigned long long total = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    const char* at = line;
    while (*at == ' ') ++at;
    if (std::strncmp(at, "LOC:", 4) != 0) continue;
    at += 4;
    char* end = nullptr;
    for (unsigned long long n = std::strtoull(at, &end, 10); end != at; n = std::strtoull(at, &end, 10)) {
      total += n;
      at = end;
    }
    break;
  }
  std::fclose(f);
  return total;
}

struct Sizes {
  size_t bytes;
  const char* name;
  int rounds;
};

}  // namespace

int main(int argc, char** argv) {
  const int scale = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  const std::string suffix = argc > 2 ? argv[2] : "";
  const auto nodes = hostrt::detail::bound_edu_nodes();
  if (nodes.size() < 2) return std::fprintf(stderr, "vfio_bench: needs two edu_accel devices\n"), 1;
  Fd fd(nodes[0].render);
  BoundToVfio bound(nodes[1].pci);
  if (fd.get() < 0 || !bound.ok())
    return std::fprintf(stderr, "vfio_bench: cannot bind %s to vfio-pci\n", nodes[1].pci.c_str()), 1;
  Vfio vfio(nodes[1].pci);
  if (!vfio.error().empty()) return std::fprintf(stderr, "vfio_bench: %s\n", vfio.error().c_str()), 1;

  const Sizes sizes[] = {
      {kPage, "4KiB", 200 * scale}, {1u << 20, "1MiB", 40 * scale}, {64u << 20, "64MiB", 5 * scale}};
  int failed = 0;
  for (const auto& s : sizes) {
    void* p = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return std::fprintf(stderr, "mmap failed\n"), 1;
    madvise(p, s.bytes, MADV_NOHUGEPAGE);
    for (size_t off = s.bytes; off > 0; off -= kPage) static_cast<volatile char*>(p)[off - kPage] = 1;
    std::vector<double> edu, vf;
    std::vector<double> edu_quiet;  // registrations no timer interrupt landed in
    unsigned ticked = 0;
    for (int i = 0; i <= s.rounds && !failed; ++i) {  // round 0 warms both up
      uint32_t h = 0;
      const unsigned long long ticks = timer_interrupts();
      auto t0 = Clock::now();
      if (bo_userptr(fd.get(), p, s.bytes, 0, &h) || gem_close(fd.get(), h)) failed = 1;
      const auto t_edu = Clock::now();
      const bool quiet = timer_interrupts() == ticks;
      const auto t1 = Clock::now();
      if (!vfio.map(p, s.bytes) || !vfio.unmap(s.bytes)) failed = 2;
      auto t2 = Clock::now();
      if (i == 0) continue;
      edu.push_back(std::chrono::duration<double, std::micro>(t_edu - t0).count());
      vf.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      if (quiet)
        edu_quiet.push_back(edu.back());
      else
        ++ticked;
    }
    munmap(p, s.bytes);
    if (failed)
      return std::fprintf(stderr, "vfio_bench: %s failed at %s: %s\n",
                          failed == 1 ? "BO_USERPTR" : "VFIO MAP_DMA", s.name, std::strerror(errno)),
             1;
    const double e = median(edu), v = median(vf);
    std::printf("METRIC reg_edu_us_%s%s %.1f us\n", s.name, suffix.c_str(), e);
    std::printf("METRIC reg_vfio_us_%s%s %.1f us\n", s.name, suffix.c_str(), v);
    std::printf("METRIC reg_vs_vfio_ratio_%s%s %.3f ratio\n", s.name, suffix.c_str(), e / v);
    // Under the default lazy IOTLB flushing (DMA-FQ) an unmap queues its IOVA, and the call
    // that finds the flush queue due flushes it: at 4 KiB a few calls take ~3x the median
    // (measured: with no timer interrupt inside them; the _strict run, without the queue, has
    // none above 2x). A timer tick inside a call is counted apart.
    std::printf("METRIC reg_edu_p99_over_median_%s%s %.2f ratio\n", s.name, suffix.c_str(),
                percentile(edu, 0.99) / e);
    std::printf("METRIC reg_edu_slowest_over_median_%s%s %.2f ratio\n", s.name, suffix.c_str(),
                *std::max_element(edu.begin(), edu.end()) / e);
    if (!edu_quiet.empty())
      std::printf("METRIC reg_edu_quiet_slowest_over_median_%s%s %.2f ratio\n", s.name, suffix.c_str(),
                  *std::max_element(edu_quiet.begin(), edu_quiet.end()) / e);
    std::printf("METRIC reg_edu_timer_interrupted_%s%s %u count\n", s.name, suffix.c_str(), ticked);
    std::printf("METRIC reg_vfio_slowest_over_median_%s%s %.2f ratio\n", s.name, suffix.c_str(),
                *std::max_element(vf.begin(), vf.end()) / v);
  }
  return 0;
}
