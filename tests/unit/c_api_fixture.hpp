// The C API's tests, parameterised by backend: the C calls pick the backend from
// HOSTRT_BACKEND, and device 0 is made current before each test.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "detail/access.hpp"
#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"

namespace hostrt::test {

class CApiBackendTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    ::setenv("HOSTRT_BACKEND", GetParam() == Backend::Emulated ? "emulated" : "drm", 1);
    SKIP_WITHOUT_DEVICE(GetParam());
    ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
    hrtGetLastError();
  }
  void TearDown() override { ::unsetenv("HOSTRT_BACKEND"); }

  // The current device's emulated backend (its held queues), or nullptr on Drm.
  static detail::EmulatedBackend* emu() { return detail::emulated_backend(*detail::capi::current_device()); }
  // The kernel (or emulated) queue behind a C stream handle (NULL: the default stream).
  static std::uint32_t queue_of(hrtStream_t s) {
    return detail::Access::core(detail::capi::stream_of(s))->queue_id();
  }
  // Runs `release` on another thread once the caller is blocked (Emulated: the engine has
  // stalled, then 50 ms more), setting `released` first: a call that must wait for what
  // `release` lets go returns only after `released` is set. On Drm it runs at once.
  template <class F>
  static std::thread release_later(std::atomic<bool>& released, F release) {
    return std::thread([&released, release] {
      if (detail::EmulatedBackend* e = emu()) {
        e->wait_until_stalled();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      released = true;
      release();
    });
  }
};

}  // namespace hostrt::test
