// A pool serving several devices (cudaMemPoolSetAccess) on both backends: without access
// another device's streams and copies are refused; with it they allocate, free, record and
// copy the pool's blocks, and a block is reused only after every device's work on it ended.
#include <optional>

#include "c_api_fixture.hpp"
#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.hpp"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"
#include "test_util.hpp"
#include "two_devices.hpp"

namespace hostrt::test {
namespace {

class PoolAccess : public TwoDevices {
 protected:
  void SetUp() override {
    TwoDevices::SetUp();
    if (IsSkipped()) return;
    s0_.emplace(d0().create_stream());
    s1_.emplace(d1().create_stream());
  }
  Stream& s0() { return *s0_; }
  Stream& s1() { return *s1_; }
  // Device 1's queue held (emulated) so that its copy is certainly pending; false on Drm.
  bool hold_s1(bool held) {
    detail::EmulatedBackend* emu = detail::emulated_backend(d1());
    if (emu) emu->hold_queue(hostrt::detail::Access::core(s1())->queue_id(), held);
    return emu != nullptr;
  }
  std::optional<Stream> s0_, s1_;
};

TEST_P(PoolAccess, AnotherDeviceUsesTheBlocksOnlyWithAccess) {
  Pool pool(d0(), PoolOptions{.thread_cache_bytes = 0});
  void* p = pool.allocate(4000, s0());
  fill(p, 4000, 17);
  EXPECT_FALSE(pool.has_access(d1()));
  EXPECT_FALSE(pointer_attributes(p).portable);
  EXPECT_THROW(s1().memcpy_async(DevicePtr(0), p, 64), WrongDevice);
  EXPECT_THROW((void)pool.allocate(64, s1()), WrongDevice);
  EXPECT_THROW(pool.deallocate(p, s1()), WrongDevice);
  EXPECT_THROW(pool.set_access(d0(), false), InvalidArgument) << "the own device's access is for good";

  pool.set_access(d1(), true);
  EXPECT_TRUE(pool.has_access(d1()));
  EXPECT_TRUE(pointer_attributes(p).portable) << "granted after the segment was made";
  void* q = pool.allocate(4000, s1());  // a block whose home stream is device 1's
  s1().memcpy_async(DevicePtr(0), p, 4000);
  s1().memcpy_async(q, DevicePtr(0), 4000);
  s1().synchronize();
  EXPECT_EQ(first_diff(p, q, 4000), -1);

  pool.set_access(d1(), false);
  try {
    s1().memcpy_async(DevicePtr(0), p, 64);
    ADD_FAILURE() << "a copy after the access was revoked";
  } catch (const WrongDevice& e) {
    EXPECT_NE(std::string(e.what()).find("no access"), std::string::npos) << e.what();
  }
  pool.deallocate(p, s0());
  pool.set_access(d1(), true);
  pool.deallocate(q, s1());
  pool.synchronize();
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
}

// record_stream of device 1's stream: the free on device 0's stream must also wait for it.
TEST_P(PoolAccess, ABlockIsReusedOnlyAfterEveryDevicesWork) {
  Pool pool(d0(), PoolOptions{.thread_cache_bytes = 0});
  pool.set_access(d1(), true);
  void* p = pool.allocate(4000, s0());
  fill(p, 4000, 19);
  const bool held = hold_s1(true);
  s1().memcpy_async(DevicePtr(0), p, 4000);
  pool.record_stream(p, s1());
  pool.deallocate(p, s0());
  void* q = pool.allocate(4000, s0());
  if (held) {
    EXPECT_NE(q, p) << "reused while device 1's copy was held";
    EXPECT_EQ(pool.stats().pending_free_bytes, 4032u);
  } else if (q == p) {
    EXPECT_TRUE(s1().reached(s1().last_submitted())) << "reused before device 1's copy completed";
  }
  hold_s1(false);
  s1().synchronize();
  pool.deallocate(q, s0());
  pool.synchronize();
  EXPECT_EQ(pool.stats().pending_free_bytes, 0u);
}

// A free on device 1's stream is ordered after device 1's work (cudaFreeAsync on any stream).
TEST_P(PoolAccess, AFreeOnTheOtherDevicesStreamWaitsForItsWork) {
  Pool pool(d0(), PoolOptions{.thread_cache_bytes = 0});
  pool.set_access(d1(), true);
  void* p = pool.allocate(4000, s0());
  const bool held = hold_s1(true);
  s1().memcpy_async(p, DevicePtr(0), 4000);
  pool.deallocate(p, s1());
  void* q = pool.allocate(4000, s0());
  if (held) {
    EXPECT_NE(q, p) << "reused while device 1 was still to write it";
  } else if (q == p) {
    EXPECT_TRUE(s1().reached(s1().last_submitted())) << "reused before device 1's copy completed";
  }
  hold_s1(false);
  s1().synchronize();
  pool.deallocate(q, s0());
}

class CPoolAccess : public CApiBackendTest {};

TEST_P(CPoolAccess, SetAndGetAccess) {
  int n = 0;
  ASSERT_EQ(hrtGetDeviceCount(&n), hrtSuccess);
  if (n < 2) GTEST_SKIP() << "needs two devices";
  hrtPool_t pool = nullptr;
  ASSERT_EQ(hrtDeviceGetDefaultMemPool(&pool, 0), hrtSuccess);
  hrtMemAccessFlags f = hrtMemAccessFlagsProtRead;
  ASSERT_EQ(hrtMemPoolGetAccess(&f, pool, 0), hrtSuccess);
  EXPECT_EQ(f, hrtMemAccessFlagsProtReadWrite);
  ASSERT_EQ(hrtMemPoolGetAccess(&f, pool, 1), hrtSuccess);
  EXPECT_EQ(f, hrtMemAccessFlagsProtNone);
  EXPECT_EQ(hrtMemPoolSetAccess(pool, 1, hrtMemAccessFlagsProtRead), hrtErrorNotSupported);
  EXPECT_EQ(hrtMemPoolSetAccess(pool, 1, static_cast<hrtMemAccessFlags>(2)), hrtErrorInvalidValue);
  EXPECT_EQ(hrtMemPoolSetAccess(pool, 0, hrtMemAccessFlagsProtNone), hrtErrorInvalidValue);
  EXPECT_EQ(hrtMemPoolSetAccess(pool, 7, hrtMemAccessFlagsProtReadWrite), hrtErrorInvalidDevice);

  void* p = nullptr;
  ASSERT_EQ(hrtMallocAsync(&p, 4000, nullptr), hrtSuccess);
  fill(p, 4000, 23);
  ASSERT_EQ(hrtSetDevice(1), hrtSuccess);
  EXPECT_EQ(hrtMemcpy(hrtDevicePtr(0), p, 64, hrtMemcpyHostToDevice), hrtErrorWrongDevice);
  ASSERT_EQ(hrtMemPoolSetAccess(pool, 1, hrtMemAccessFlagsProtReadWrite), hrtSuccess);
  ASSERT_EQ(hrtMemPoolGetAccess(&f, pool, 1), hrtSuccess);
  EXPECT_EQ(f, hrtMemAccessFlagsProtReadWrite);
  void* out = nullptr;
  ASSERT_EQ(hrtMallocHost(&out, 4096), hrtSuccess);
  EXPECT_EQ(hrtMemcpy(hrtDevicePtr(0), p, 4000, hrtMemcpyHostToDevice), hrtSuccess)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtMemcpy(out, hrtDevicePtr(0), 4000, hrtMemcpyDeviceToHost), hrtSuccess);
  EXPECT_EQ(first_diff(out, p, 4000), -1);
  EXPECT_EQ(hrtFreeAsync(p, nullptr), hrtSuccess) << "device 1's NULL stream, now allowed";
  EXPECT_EQ(hrtFreeHost(out), hrtSuccess);
  EXPECT_EQ(hrtMemPoolSetAccess(pool, 1, hrtMemAccessFlagsProtNone), hrtSuccess);
  ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolAccess, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, CPoolAccess, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
