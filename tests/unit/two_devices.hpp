// Tests that need two devices of one backend (parameterised by backend): skipped with fewer.
#pragma once

#include <optional>

#include "hostrt/hostrt.hpp"
#include "test_util.hpp"

namespace hostrt::test {

class TwoDevices : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    if (Device::count(GetParam()) < 2) GTEST_SKIP() << "needs two devices";
    d0_.emplace(Device::open(0, GetParam()));
    d1_.emplace(Device::open(1, GetParam()));
  }
  Device& d0() { return *d0_; }
  Device& d1() { return *d1_; }

 private:
  std::optional<Device> d0_, d1_;
};

}  // namespace hostrt::test
