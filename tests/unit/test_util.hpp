// Shared helpers for the conformance suites: backend parameterisation and data patterns.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hostrt/hostrt.hpp"

namespace hostrt::test {

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::Drm ? "Drm" : "Emulated";
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
