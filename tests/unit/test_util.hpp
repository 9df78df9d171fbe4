// Shared helpers for the conformance suites: backend parameterisation and data patterns.
#pragma once

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hostrt/hostrt.hpp"

#ifdef HOSTRT_COVERAGE
extern "C" void __gcov_dump(void);
#endif

namespace hostrt::test {

// A forked child that leaves with _exit() writes no gcov counters: in the coverage build, write
// them first, so that what only children run is counted too.
inline void flush_coverage() {
#ifdef HOSTRT_COVERAGE
  __gcov_dump();
#endif
}

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::Drm ? "Drm" : "Emulated";
}

// dev.pinned_bytes() once it equals `expect`, or its value after a minute. The driver drops a
// finished job's references to its BOs when the scheduler frees the job, a moment after the
// fence signals: a buffer freed right after synchronize() may still be charged briefly.
inline std::uint64_t settled_pinned_bytes(const Device& dev, std::uint64_t expect) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  std::uint64_t now = dev.pinned_bytes();
  while (now != expect && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = dev.pinned_bytes();
  }
  return now;
}

// A byte pattern that differs per seed and per position (and never repeats every 256 bytes).
inline void fill(void* p, std::size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = static_cast<unsigned char>((i * 131 + (i >> 8) * 7 + seed * 29 + 1) & 0xff);
}

inline std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  fill(v.data(), n, seed);
  return v;
}

// Index of the first differing byte, or -1 when equal: gives a readable failure.
inline long first_diff(const void* a, const void* b, std::size_t n) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (std::size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) return static_cast<long>(i);
  return -1;
}

// CAP_SYS_NICE in the calling thread's effective set: what QUEUE_CREATE at high priority
// needs (the driver's capable() checks the calling task, i.e. thread).
inline bool has_cap_sys_nice() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_SYS_NICE)].effective & CAP_TO_MASK(CAP_SYS_NICE)) != 0;
}

// Clears CAP_SYS_NICE from the calling thread's effective set while it lives, so a test can
// see the unprivileged path as root, in process and without fork. Capabilities are per
// thread (raw capset, unlike setuid, is not broadcast by glibc): the rest of the process
// keeps its own. The capability stays permitted, so the destructor can raise it again.
class WithoutCapSysNice {
 public:
  WithoutCapSysNice() {
    if (syscall(SYS_capget, &hdr_, data_) != 0) return;
    saved_ = data_[CAP_TO_INDEX(CAP_SYS_NICE)].effective;
    data_[CAP_TO_INDEX(CAP_SYS_NICE)].effective &= ~CAP_TO_MASK(CAP_SYS_NICE);
    changed_ = syscall(SYS_capset, &hdr_, data_) == 0;
  }
  ~WithoutCapSysNice() {
    if (!changed_) return;
    data_[CAP_TO_INDEX(CAP_SYS_NICE)].effective = saved_;
    (void)syscall(SYS_capset, &hdr_, data_);
  }
  WithoutCapSysNice(const WithoutCapSysNice&) = delete;
  WithoutCapSysNice& operator=(const WithoutCapSysNice&) = delete;

 private:
  __user_cap_header_struct hdr_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data_[_LINUX_CAPABILITY_U32S_3] = {};
  std::uint32_t saved_ = 0;
  bool changed_ = false;
};

#define SKIP_WITHOUT_DEVICE(backend)                                                             \
  do {                                                                                           \
    if (::hostrt::Device::count(backend) == 0)                                                   \
      GTEST_SKIP() << "no " << ::hostrt::to_string(backend)                                      \
                   << " device here (the Drm backend runs inside the VM with edu_accel loaded)"; \
  } while (0)

// A device of the test's backend and one stream on it; skips where that backend has none.
class DeviceStreamTest : public ::testing::TestWithParam<::hostrt::Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    device = std::make_unique<::hostrt::Device>(::hostrt::Device::open(0, GetParam()));
    stream = device->create_stream();
  }
  std::unique_ptr<::hostrt::Device> device;
  ::hostrt::Stream stream;
};

}  // namespace hostrt::test
