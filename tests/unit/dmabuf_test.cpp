// dma-buf sharing through the runtime: export_dmabuf / Device::import_dmabuf and their C forms
// on both backends. The emulated one refuses with NotSupported and says why; on the driver
// (inside the VM) an export imported again, on the same Device or another device, is the same
// memory, copies may name the import, and each GEM handle is closed exactly once.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "c_api_fixture.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class DmaBuf : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    dev_.emplace(Device::open(0, GetParam()));
  }
  Device& dev() { return *dev_; }
  bool drm() const { return GetParam() == Backend::Drm; }
  std::optional<Device> dev_;
};

TEST_P(DmaBuf, AnExportImportedAgainIsTheSameMemory) {
  PinnedBuffer a = dev().host_alloc(8192);
  if (!drm()) {
    try {
      (void)export_dmabuf(a);
      FAIL() << "the emulated backend exported a dma-buf";
    } catch (const NotSupported& e) {
      EXPECT_NE(std::string(e.what()).find("edu_accel driver"), std::string::npos) << e.what();
    }
    return;
  }
  UniqueFd fd = export_dmabuf(a);
  ASSERT_TRUE(fd);
  PinnedBuffer b = dev().import_dmabuf(fd.get());
  EXPECT_EQ(b.type(), MemoryType::Imported);
  EXPECT_EQ(b.size(), 8192u);
  EXPECT_EQ(b.handle(), a.handle()) << "the driver gives our own BO back";
  EXPECT_NE(b.data(), a.data()) << "mapped again, through the dma-buf";
  std::memset(a.data(), 0x5a, 8192);
  EXPECT_EQ(static_cast<unsigned char*>(b.data())[8191], 0x5a);
  EXPECT_EQ(pointer_attributes(b.data()).type, MemoryType::Imported);

  // Freeing the original must not close the handle the import still uses.
  a.reset();
  Stream s = dev().create_stream();
  std::vector<unsigned char> out(8192);
  s.memcpy_async(DevicePtr(0), b.data(), 4000);
  s.memcpy_async(out.data(), DevicePtr(0), 4000);
  s.synchronize();
  EXPECT_EQ(out[3999], 0x5a);
}

TEST_P(DmaBuf, ADeviceCopiesIntoAnotherDevicesExport) {
  if (!drm()) GTEST_SKIP() << "dma-bufs need the driver";
  if (Device::count(Backend::Drm) < 2) GTEST_SKIP() << "needs two edu devices";
  Device other = Device::open(1, Backend::Drm);
  PinnedBuffer theirs = other.host_alloc(4096);
  PinnedBuffer mine;
  {
    UniqueFd fd = export_dmabuf(theirs);
    try {
      mine = dev().import_dmabuf(fd.get());
    } catch (const InvalidArgument& e) {
      ASSERT_EQ(e.error_code(), ERANGE) << e.what();
      GTEST_SKIP() << "this device cannot reach all memory: imports are refused (" << e.what() << ")";
    }
  }  // the fd closed: the import holds the buffer
  PinnedBuffer src = dev().host_alloc(4096);
  fill(src.data(), 4096, 7);
  Stream s = dev().create_stream();
  s.memcpy_async(mine.data(), src.data(), 4096, CopyKind::H2H);
  s.synchronize();
  EXPECT_EQ(first_diff(theirs.data(), src.data(), 4096), -1) << "device 0 wrote device 1's buffer";
}

TEST_P(DmaBuf, WhatCannotBeSharedIsRefusedWithAReason) {
  EXPECT_THROW(export_dmabuf(PinnedBuffer{}), InvalidArgument);
  if (!drm()) {
    EXPECT_THROW(dev().import_dmabuf(0), NotSupported);
    return;
  }
  EXPECT_THROW(dev().import_dmabuf(-1), InvalidArgument);
  const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  try {
    dev().import_dmabuf(null);
    ADD_FAILURE() << "/dev/null imported";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.error_code(), EINVAL) << e.what();
  }
  close(null);
  std::vector<unsigned char> mem(8192);
  PinnedBuffer ro = dev().host_register(mem.data(), mem.size(), kHostRegisterReadOnly);
  EXPECT_THROW(export_dmabuf(ro), PermissionDenied) << "an importer could write a read-only registration";
}

class CDmaBuf : public CApiBackendTest {
 protected:
  bool drm() const { return GetParam() == Backend::Drm; }
};

TEST_P(CDmaBuf, TheCApiSharesAndFrees) {
  void* p = nullptr;
  ASSERT_EQ(hrtHostAlloc(&p, 4096, 0), hrtSuccess);
  int fd = -1;
  if (!drm()) {
    EXPECT_EQ(hrtExportDmaBuf(p, &fd), hrtErrorNotSupported);
    void* q = nullptr;
    size_t n = 0;
    EXPECT_EQ(hrtImportDmaBuf(0, &q, &n), hrtErrorNotSupported);
    EXPECT_EQ(hrtFreeHost(p), hrtSuccess);
    return;
  }
  EXPECT_EQ(hrtExportDmaBuf(static_cast<char*>(p) + 64, &fd), hrtErrorInvalidValue) << "not a buffer's start";
  ASSERT_EQ(hrtExportDmaBuf(p, &fd), hrtSuccess);
  void* q = nullptr;
  size_t n = 0;
  ASSERT_EQ(hrtImportDmaBuf(fd, &q, &n), hrtSuccess);
  close(fd);
  EXPECT_EQ(n, 4096u);
  hrtPointerAttributes at{};
  ASSERT_EQ(hrtPointerGetAttributes(&at, q), hrtSuccess);
  EXPECT_EQ(at.type, hrtMemoryTypeImported);
  EXPECT_EQ(hrtFreeHost(p), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(q), hrtSuccess);
  EXPECT_EQ(hrtImportDmaBuf(-1, &q, &n), hrtErrorInvalidValue);
}

INSTANTIATE_TEST_SUITE_P(Backends, DmaBuf, ::testing::Values(Backend::Emulated, Backend::Drm), backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, CDmaBuf, ::testing::Values(Backend::Emulated, Backend::Drm), backend_name);

}  // namespace
}  // namespace hostrt::test
