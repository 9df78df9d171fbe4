// The C API's tests, parameterised by backend: the C calls pick the backend from
// HOSTRT_BACKEND, and device 0 is made current before each test.
#pragma once

#include <cstdlib>

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
};

}  // namespace hostrt::test
