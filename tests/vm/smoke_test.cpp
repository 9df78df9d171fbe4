// In-VM smoke suite: the driver binds every edu device, exposes a render node that libdrm
// recognises, and moves data through the DMA engine. Runs as root inside the test VM.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"

using hostrt::detail::bound_edu_nodes;
using hostrt::detail::field;
using hostrt::detail::read_text;

namespace {

int expected_devices() {
  const char* n = std::getenv("VM_EDU");
  return n ? std::atoi(n) : 1;
}

unsigned expected_dma_bits() {
  const char* mask = std::getenv("VM_DMA_MASK");
  return mask && *mask ? 64 : 28;
}

struct FdCloser {
  void operator()(const int* fd) const {
    close(*fd);
    delete fd;
  }
};

TEST(Smoke, DriverBindsEveryEduDevice) {
  EXPECT_EQ(static_cast<int>(bound_edu_nodes().size()), expected_devices());
}

TEST(Smoke, EachDeviceHasARenderNodeNamedEduAccel) {
  for (const auto& n : bound_edu_nodes()) {
    ASSERT_GE(n.render_minor, 128) << n.pci << " has no render node";
    int fd = open(n.render.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << n.render;
    std::unique_ptr<int, FdCloser> guard(new int(fd));
    drmVersionPtr v = drmGetVersion(fd);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(std::string(v->name, v->name_len), "edu_accel");
    drmFreeVersion(v);
  }
}

TEST(Smoke, LibdrmEnumeratesTheDevicesOnThePciBus) {
  drmDevicePtr devs[16];
  int n = drmGetDevices2(0, devs, 16);
  ASSERT_GE(n, 0);
  int edu = 0;
  for (int i = 0; i < n; ++i) {
    if (devs[i]->bustype == DRM_BUS_PCI && devs[i]->deviceinfo.pci->vendor_id == 0x1234 &&
        devs[i]->deviceinfo.pci->device_id == 0x11e8 && (devs[i]->available_nodes & (1 << DRM_NODE_RENDER)))
      ++edu;
  }
  drmFreeDevices(devs, n);
  EXPECT_EQ(edu, expected_devices());
}

TEST(Smoke, DmaMaskMatchesTheMachine) {
  for (const auto& n : bound_edu_nodes()) {
    auto state = read_text(n.debugfs + "/state");
    ASSERT_TRUE(state) << n.debugfs;
    EXPECT_EQ(field(*state, "dma_bits"), std::to_string(expected_dma_bits())) << n.pci;
    EXPECT_EQ(field(*state, "irq"), "msi") << n.pci;
  }
}

TEST(Smoke, DmaRoundTripThroughEachDevice) {
  for (const auto& n : bound_edu_nodes()) {
    auto before = read_text(n.debugfs + "/state");
    auto engine_before = read_text(n.debugfs + "/engine");
    auto verdict = read_text(n.debugfs + "/selftest");
    auto after = read_text(n.debugfs + "/state");
    auto engine_after = read_text(n.debugfs + "/engine");
    ASSERT_TRUE(before && verdict && after && engine_before && engine_after) << n.debugfs;
    EXPECT_EQ(verdict->rfind("PASS", 0), 0u) << n.pci << ": " << *verdict;
    // Two transfers, each completed by its own interrupt.
    EXPECT_EQ(std::stoll(*field(*after, "dma_transfers")) - std::stoll(*field(*before, "dma_transfers")), 2)
        << n.pci;
    // Run by the engine, as a job's are (the self test once programmed the device itself).
    EXPECT_EQ(
        std::stoll(*field(*engine_after, "transfers")) - std::stoll(*field(*engine_before, "transfers")), 2)
        << n.pci;
  }
}

// Any DMA interrupt used to end the self test's wait: a stray one (the fault_selftest_stray_irq
// knob raises one as each transfer starts) made it read the result, program the next transfer
// over the running one, and free buffers the device was still writing.
TEST(Smoke, SelfTestWaitsForItsTransferNotForAStrayInterrupt) {
  for (const auto& n : bound_edu_nodes()) {
    ASSERT_TRUE(edu_test::write_sysfs(n.debugfs + "/fault_selftest_stray_irq", "1")) << n.debugfs;
    auto verdict = read_text(n.debugfs + "/selftest");
    edu_test::write_sysfs(n.debugfs + "/fault_selftest_stray_irq", "0");
    ASSERT_TRUE(verdict) << n.debugfs;
    EXPECT_EQ(verdict->rfind("PASS", 0), 0u) << n.pci << ": " << *verdict;
  }
}

// debugfs `pins` lists every open file of the device with its process: one line for this
// process while it holds the render node open, none after it closes it.
TEST(Smoke, PinsListsEachOpenFile) {
  for (const auto& n : bound_edu_nodes()) {
    const auto lines_of_mine = [&] {  // rows "client tgid command pinned_bytes"
      auto text = read_text(n.debugfs + "/pins");
      EXPECT_TRUE(text) << n.debugfs;
      std::istringstream in(text.value_or(""));
      int count = 0;
      for (std::string line; std::getline(in, line);) {
        std::istringstream row(line);
        long long id = -1, tgid = -1;
        if (row >> id >> tgid && tgid == getpid()) ++count;
      }
      return count;
    };
    const int before = lines_of_mine();
    const int fd = open(n.render.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << n.render;
    EXPECT_EQ(lines_of_mine(), before + 1) << n.pci;
    close(fd);
    EXPECT_EQ(lines_of_mine(), before) << n.pci << ": the closed file is still listed";
  }
}

}  // namespace
