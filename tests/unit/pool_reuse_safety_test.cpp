// Reuse safety: fill a pool block, copy it to the device on stream S, free it on S, at once
// allocate the same size and overwrite that block, then copy the device buffer back and
// compare. A pool that hands the block out before the host-to-device copy has run lets the
// overwrite reach the device: the comparison sees it. Built with -DHOSTRT_POOL_UNSAFE_REUSE=ON
// (the pool then reuses blocks at once), this test must fail; that is how we know it can.
//
// Runs on the Emulated backend on the host and on the real driver in the VM (skips when there
// is no such device). To make sure the copy is still queued when the block is overwritten,
// each round first queues a slow job on S: a large host-to-host copy on Emulated (its engine
// is fast), a single transfer on Drm (edu takes 100 ms of guest time per DMA).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "hostrt/hostrt.hpp"
#include "hostrt/pool.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class PoolReuseSafetyTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    device = std::make_unique<Device>(Device::open(0, GetParam()));
    s = device->create_stream();
    s2 = device->create_stream();
    const std::size_t blocker = GetParam() == Backend::Emulated ? std::size_t{32} << 20 : 4096;
    blocker_src = device->host_alloc(blocker);
    blocker_dst = device->host_alloc(blocker);
    out = device->host_alloc(4096);
  }
  // Queues work that keeps the stream busy for a while.
  void busy(Stream& st) {
    st.memcpy_async(blocker_dst.data(), blocker_src.data(), blocker_src.size(), CopyKind::H2H);
  }

  std::unique_ptr<Device> device;
  Stream s, s2;
  PinnedBuffer blocker_src, blocker_dst, out;
};

TEST_P(PoolReuseSafetyTest, FreedBlockIsNotOverwrittenBeforeItsCopyRuns) {
  Pool pool(*device);
  const int rounds = GetParam() == Backend::Emulated ? 40 : 6;
  int corrupted = 0, reused_at_once = 0;
  for (int r = 0; r < rounds; ++r) {
    const std::size_t n = r % 2 ? 4095 : 64 * (1 + r % 60);
    auto* a = static_cast<unsigned char*>(pool.allocate(n, s));
    fill(a, n, static_cast<unsigned>(r));
    const std::vector<unsigned char> want(a, a + n);
    busy(s);
    s.memcpy_async(DevicePtr(0), a, n);
    pool.deallocate(a, s);
    auto* b = static_cast<unsigned char*>(pool.allocate(n, s));  // "immediately allocate"
    if (b == a) ++reused_at_once;
    std::memset(b, 0xEE, n);  // "and overwrite"
    s.memcpy_async(out.data(), DevicePtr(0), n);
    s.synchronize();
    if (std::memcmp(out.data(), want.data(), n) != 0) ++corrupted;
    pool.deallocate(b, s);
  }
  EXPECT_EQ(corrupted, 0) << "rounds whose device copy saw the overwrite: " << corrupted << " of " << rounds
                          << " (blocks handed out again at once: " << reused_at_once << ")";
}

TEST_P(PoolReuseSafetyTest, RecordStreamProtectsABlockUsedOnAnotherStream) {
  Pool pool(*device);
  const int rounds = GetParam() == Backend::Emulated ? 20 : 3;
  int corrupted = 0;
  for (int r = 0; r < rounds; ++r) {
    const std::size_t n = 2048;
    auto* a = static_cast<unsigned char*>(pool.allocate(n, s));
    fill(a, n, static_cast<unsigned>(r + 100));
    const std::vector<unsigned char> want(a, a + n);
    busy(s2);
    s2.memcpy_async(DevicePtr(0), a, n);  // used on s2, owned by s
    pool.record_stream(a, s2);
    pool.deallocate(a, s);  // s itself is idle
    auto* b = static_cast<unsigned char*>(pool.allocate(n, s));
    std::memset(b, 0x11, n);
    s2.memcpy_async(out.data(), DevicePtr(0), n);
    s2.synchronize();
    if (std::memcmp(out.data(), want.data(), n) != 0) ++corrupted;
    pool.deallocate(b, s);
  }
  EXPECT_EQ(corrupted, 0) << "of " << rounds << " rounds";
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolReuseSafetyTest, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
