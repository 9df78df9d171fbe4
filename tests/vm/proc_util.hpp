// What /proc tells a root test about memory: physical frames and pin counters.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace edu_test {

// PFN of each page of [addr, addr + bytes), from /proc/self/pagemap (root only: others read 0).
inline std::vector<uint64_t> pfns(const void* addr, size_t bytes) {
  const uintptr_t page = 4096;
  const uintptr_t first = reinterpret_cast<uintptr_t>(addr) / page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(addr) + bytes - 1) / page;
  std::vector<uint64_t> out(last - first + 1);
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t want = static_cast<ssize_t>(out.size() * sizeof(uint64_t));
  const ssize_t got = pread(fd, out.data(), want, static_cast<off_t>(first * sizeof(uint64_t)));
  close(fd);
  if (got != want) return {};
  for (auto& e : out) e = (e >> 63) ? (e & ((1ull << 55) - 1)) : 0;  // bit 63: present
  return out;
}

// Physically contiguous runs among the pages, each at most max_run_bytes long: what the
// driver's scatter-gather table must have as entries.
inline unsigned contiguous_runs(const std::vector<uint64_t>& pfn, uint64_t max_run_bytes) {
  unsigned runs = 0;
  uint64_t run_bytes = 0;
  for (size_t i = 0; i < pfn.size(); ++i) {
    if (i > 0 && pfn[i] == pfn[i - 1] + 1 && run_bytes + 4096 <= max_run_bytes) {
      run_bytes += 4096;
    } else {
      ++runs;
      run_bytes = 4096;
    }
  }
  return runs;
}

inline uint64_t vmstat(const std::string& key) {
  std::ifstream in("/proc/vmstat");
  std::string k;
  uint64_t v;
  while (in >> k >> v)
    if (k == key) return v;
  return ~0ull;
}

// Pages pinned with FOLL_PIN and not yet released, system-wide. The counters live in per-CPU
// deltas folded only now and then; writing vm/stat_refresh (root) folds them first.
inline int64_t pins_outstanding() {
  std::ofstream("/proc/sys/vm/stat_refresh") << "1\n";
  return static_cast<int64_t>(vmstat("nr_foll_pin_acquired")) -
         static_cast<int64_t>(vmstat("nr_foll_pin_released"));
}

}  // namespace edu_test
