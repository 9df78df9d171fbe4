// Portable pinned memory (cudaHostAllocPortable / cudaHostRegisterPortable) on both
// backends: memory made on one device is copied by another device's streams (and by another
// open of the same device), read-only stays read-only everywhere, memory that is not portable
// is still refused, the other device's view keeps the pages alive for its queued work, and
// free_host_sync waits for the other devices' streams too.
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "c_api_fixture.hpp"
#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"
#include "two_devices.hpp"

namespace hostrt::test {
namespace {

class Portable : public TwoDevices {
 protected:
  // H2D from src then D2H into dst on s: what a stream of s's device did with both.
  static void bounce(Stream& s, void* dst, const void* src, std::size_t n) {
    s.memcpy_async(DevicePtr(0), src, n);
    s.memcpy_async(dst, DevicePtr(0), n);
    s.synchronize();
  }
};

TEST_P(Portable, HostAllocOfOneDeviceIsCopiedByTheOther) {
  PinnedBuffer p = d0().host_alloc(8192, kHostAllocPortable);
  EXPECT_TRUE(pointer_attributes(p.data()).portable);
  EXPECT_EQ(pointer_attributes(p.data()).device, 0u) << "it stays device 0's memory";
  auto* bytes = static_cast<unsigned char*>(p.data());
  fill(bytes, 4000, 11);
  Stream s1 = d1().create_stream();
  bounce(s1, bytes + 4096, bytes, 4000);  // device 1 reads and writes device 0's buffer
  EXPECT_EQ(first_diff(bytes + 4096, bytes, 4000), -1);

  // Device 0 still uses its own handle, in the same buffer.
  Stream s0 = d0().create_stream();
  std::memset(bytes + 4096, 0, 4000);
  bounce(s0, bytes + 4096, bytes, 4000);
  EXPECT_EQ(first_diff(bytes + 4096, bytes, 4000), -1);

  PinnedBuffer private_mem = d0().host_alloc(4096);
  EXPECT_FALSE(pointer_attributes(private_mem.data()).portable);
  try {
    s1.memcpy_async(DevicePtr(0), private_mem.data(), 64);
    ADD_FAILURE() << "device 1 copied device 0's memory that is not portable";
  } catch (const WrongDevice& e) {
    EXPECT_NE(std::string(e.what()).find("not portable"), std::string::npos) << e.what();
  }
}

TEST_P(Portable, AnotherOpenOfTheSameDeviceCopiesItToo) {
  Device again = Device::open(0, GetParam());
  PinnedBuffer p = d0().host_alloc(4096, kHostAllocPortable);
  PinnedBuffer out = again.host_alloc(4096);
  fill(p.data(), 4000, 3);
  Stream s = again.create_stream();
  bounce(s, out.data(), p.data(), 4000);
  EXPECT_EQ(first_diff(out.data(), p.data(), 4000), -1);
}

TEST_P(Portable, RegisteredRangesAreRegisteredOnTheOtherDeviceReadOnlyIncluded) {
  std::vector<unsigned char> mem(3 * 4096);
  fill(mem.data(), 4000, 5);
  PinnedBuffer rw = d0().host_register(mem.data(), 8192, kHostRegisterPortable);
  PinnedBuffer ro =
      d0().host_register(mem.data() + 8192, 4096, kHostRegisterPortable | kHostRegisterReadOnly);
  EXPECT_TRUE(pointer_attributes(mem.data()).portable);
  Stream s1 = d1().create_stream();
  const std::uint64_t before = d1().pinned_bytes();
  bounce(s1, mem.data() + 4096, mem.data(), 4000);
  EXPECT_EQ(first_diff(mem.data() + 4096, mem.data(), 4000), -1);
  EXPECT_GT(d1().pinned_bytes(), before) << "device 1 pinned the range itself";

  s1.memcpy_async(DevicePtr(0), mem.data() + 8192, 64);  // reading a read-only range is fine
  s1.synchronize();
  EXPECT_THROW(s1.memcpy_async(mem.data() + 8192, DevicePtr(0), 64), InvalidArgument)
      << "read-only on device 0 must be read-only on device 1";

  rw.reset();
  ro.reset();
  // The driver drops a finished job's BO references when its scheduler frees the job, shortly
  // after the fence: the last copy's view may be released a moment after synchronize.
  EXPECT_EQ(settled_pinned_bytes(d1(), before), before) << "device 1's registration goes with the buffer";
}

TEST_P(Portable, TheOtherDevicesQueuedCopyOutlivesTheFree) {
  PinnedBuffer p = d0().host_alloc(4096, kHostAllocPortable);
  fill(p.data(), 4000, 9);
  const std::vector<unsigned char> expect(static_cast<unsigned char*>(p.data()),
                                          static_cast<unsigned char*>(p.data()) + 4000);
  Stream s1 = d1().create_stream();
  detail::EmulatedBackend* emu = detail::emulated_backend(d1());
  if (emu) emu->hold_queue(hostrt::detail::Access::core(s1)->queue_id(), true);
  s1.memcpy_async(DevicePtr(0), p.data(), 4000);  // queued, not run while held
  p.reset();                                      // freed with device 1's copy still queued
  if (emu) emu->hold_queue(hostrt::detail::Access::core(s1)->queue_id(), false);
  PinnedBuffer out = d1().host_alloc(4096);
  s1.memcpy_async(out.data(), DevicePtr(0), 4000);
  s1.synchronize();
  EXPECT_EQ(first_diff(out.data(), expect.data(), 4000), -1) << "device 1 read freed memory";
}

TEST_P(Portable, FreeHostSyncWaitsForTheOtherDevicesStreams) {
  std::vector<unsigned char> mem(4096, 0);
  PinnedBuffer reg = d0().host_register(mem.data(), mem.size(), kHostRegisterPortable);
  PinnedBuffer src = d1().host_alloc(4000);
  fill(src.data(), 4000, 13);
  Stream s1 = d1().create_stream();
  // Device 1's D2H into device 0's portable range, made to wait: held on the emulated
  // backend, behind a longer copy on the driver (first: H2H goes through the device buffer).
  detail::EmulatedBackend* emu = detail::emulated_backend(d1());
  std::thread release;
  if (emu) {
    emu->hold_queue(hostrt::detail::Access::core(s1)->queue_id(), true);
    release = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      emu->hold_queue(hostrt::detail::Access::core(s1)->queue_id(), false);
    });
  } else {
    PinnedBuffer big = d1().host_alloc(64u << 10);
    PinnedBuffer big_dst = d1().host_alloc(64u << 10);
    s1.memcpy_async(big_dst.data(), big.data(), big.size(), CopyKind::H2H);
  }
  s1.memcpy_async(DevicePtr(0), src.data(), 4000);
  s1.memcpy_async(mem.data(), DevicePtr(0), 4000);
  free_host_sync(std::move(reg));
  EXPECT_EQ(first_diff(mem.data(), src.data(), 4000), -1)
      << "free_host_sync returned before device 1 finished writing the range";
  if (release.joinable()) release.join();
  s1.synchronize();
}

class CPortable : public CApiBackendTest {};

TEST_P(CPortable, HostAllocPortableIsUsableOnEveryDevice) {
  int n = 0;
  ASSERT_EQ(hrtGetDeviceCount(&n), hrtSuccess);
  if (n < 2) GTEST_SKIP() << "needs two devices";
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(hrtHostAlloc(&p, 4096, hrtHostAllocPortable), hrtSuccess);
  ASSERT_EQ(hrtHostAlloc(&q, 4096, hrtHostAllocDefault), hrtSuccess);
  hrtPointerAttributes at{};
  ASSERT_EQ(hrtPointerGetAttributes(&at, p), hrtSuccess);
  EXPECT_EQ(at.portable, 1);
  EXPECT_EQ(at.device, 0);
  ASSERT_EQ(hrtPointerGetAttributes(&at, q), hrtSuccess);
  EXPECT_EQ(at.portable, 0);
  fill(p, 4000, 21);

  ASSERT_EQ(hrtSetDevice(1), hrtSuccess);
  void* out = nullptr;
  ASSERT_EQ(hrtMallocHost(&out, 4096), hrtSuccess);
  EXPECT_EQ(hrtMemcpy(hrtDevicePtr(0), p, 4000, hrtMemcpyHostToDevice), hrtSuccess)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtMemcpy(out, hrtDevicePtr(0), 4000, hrtMemcpyDeviceToHost), hrtSuccess)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(first_diff(out, p, 4000), -1);
  EXPECT_EQ(hrtMemcpy(hrtDevicePtr(0), q, 64, hrtMemcpyHostToDevice), hrtErrorWrongDevice);
  EXPECT_EQ(hrtFreeHost(out), hrtSuccess);
  EXPECT_EQ(hrtFreeHostSync(p), hrtSuccess) << "freed from another current device than its own";
  ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(q), hrtSuccess);
}

TEST_P(CPortable, FlagsOfCudaItCannotHonourAreRefusedWithAReason) {
  void* p = nullptr;
  EXPECT_EQ(hrtHostAlloc(&p, 4096, hrtHostAllocMapped), hrtErrorNotSupported);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("device-side mapping"), std::string::npos)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtHostAlloc(&p, 4096, hrtHostAllocWriteCombined | hrtHostAllocPortable), hrtErrorNotSupported);
  EXPECT_EQ(hrtHostAlloc(&p, 4096, 8u), hrtErrorInvalidValue);
  std::vector<unsigned char> mem(4096);
  EXPECT_EQ(hrtHostRegister(mem.data(), mem.size(), 4u), hrtErrorInvalidValue);
  ASSERT_EQ(hrtHostRegister(mem.data(), mem.size(), hrtHostRegisterPortable | hrtHostRegisterReadOnly),
            hrtSuccess);
  hrtPointerAttributes at{};
  ASSERT_EQ(hrtPointerGetAttributes(&at, mem.data() + 100), hrtSuccess);
  EXPECT_EQ(at.type, hrtMemoryTypeRegistered);
  EXPECT_EQ(at.portable, 1);
  EXPECT_EQ(hrtHostUnregister(mem.data()), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, Portable, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, CPortable, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
