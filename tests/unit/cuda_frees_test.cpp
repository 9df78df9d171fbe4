// The C API's frees that carry CUDA's names mean what CUDA's mean: hrtFreeHost waits for the
// device as cudaFreeHost does, and hrtPoolFree (cudaFree of stream-ordered memory)
// synchronizes the device before it frees. The immediate forms have names of their own.
//
// The work they must wait for is a copy that cannot end yet (Emulated: its queue is held until
// another thread releases it, once the caller is blocked) or ends late (Drm: a 4096-byte
// staged copy, two edu transfers).
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>

#include "c_api_fixture.hpp"
#include "detail/access.hpp"
#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt_pool.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class CudaFrees : public CApiBackendTest {
 protected:
  static constexpr std::size_t kBytes = 4096;

  void SetUp() override {
    CApiBackendTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(hrtMallocHost(&src_, kBytes), hrtSuccess) << hrtGetLastErrorMessage();
    ASSERT_EQ(hrtMallocHost(&dst_, kBytes), hrtSuccess);
    std::memset(src_, 0x3C, kBytes);
    std::memset(dst_, 0, kBytes);
    ASSERT_EQ(hrtStreamCreate(&s_), hrtSuccess);
  }
  void TearDown() override {
    if (!IsSkipped()) {
      release();
      EXPECT_EQ(hrtDeviceSynchronize(), hrtSuccess) << hrtGetLastErrorMessage();
      hrtStreamDestroy(s_);
      hrtFreeHost(src_);
      hrtFreeHost(dst_);
    }
    CApiBackendTest::TearDown();
  }

  std::uint32_t queue() const { return queue_of(s_); }
  // Queues on s_ a copy of `from` into dst_ that cannot end yet (Emulated) or ends late (Drm).
  void slow_copy(const void* from, std::size_t n = kBytes) {
    if (detail::EmulatedBackend* e = emu()) e->hold_queue(queue(), true);
    ASSERT_EQ(hrtMemcpyAsync(dst_, from, n, hrtMemcpyHostToHost, s_), hrtSuccess) << hrtGetLastErrorMessage();
  }
  void release() {
    if (detail::EmulatedBackend* e = emu(); e && s_) e->hold_queue(queue(), false);
  }
  // Releases the held queue once the caller is blocked (CApiBackendTest::release_later).
  std::thread release_later(std::atomic<bool>& released) {
    return CApiBackendTest::release_later(released, [this] { release(); });
  }

  void *src_ = nullptr, *dst_ = nullptr;
  hrtStream_t s_ = nullptr;
};

// cudaFreeHost synchronizes: when hrtFreeHost returns, the copy queued before has ended (a
// caller may read its destination, as CUDA code does after a free).
TEST_P(CudaFrees, FreeHostWaitsForTheWorkQueuedBefore) {
  void* other = nullptr;
  ASSERT_EQ(hrtMallocHost(&other, 64), hrtSuccess);
  slow_copy(src_);
  std::atomic<bool> released{false};
  std::thread releaser = release_later(released);
  EXPECT_EQ(hrtFreeHost(other), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_TRUE(released.load()) << "hrtFreeHost returned while the copy was held";
  EXPECT_EQ(hrtStreamQuery(s_), hrtSuccess) << "hrtFreeHost returned before the copy ended";
  releaser.join();
  void* freed_again = other;
  EXPECT_EQ(hrtFreeHost(freed_again), hrtErrorInvalidValue) << "freed once only";
}

// The immediate free returns while the copy is held, and the copy still reads valid memory:
// its job holds its own reference on the buffer.
TEST_P(CudaFrees, FreeHostNoWaitReturnsAtOnceAndTheQueuedCopyStillCompletes) {
  if (!emu()) GTEST_SKIP() << "needs a held queue";
  void* from = nullptr;
  ASSERT_EQ(hrtMallocHost(&from, kBytes), hrtSuccess);
  std::memset(from, 0x5E, kBytes);
  slow_copy(from);
  EXPECT_EQ(hrtFreeHostNoWait(from), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtStreamQuery(s_), hrtErrorNotReady);
  release();
  ASSERT_EQ(hrtStreamSynchronize(s_), hrtSuccess);
  const std::vector<unsigned char> want(kBytes, 0x5E);
  EXPECT_EQ(first_diff(dst_, want.data(), kBytes), -1);
  EXPECT_EQ(hrtFreeHostNoWait(nullptr), hrtSuccess);
  EXPECT_EQ(hrtFreeHostNoWait(from), hrtErrorInvalidValue) << "freed once only";
}

// cudaFree of cudaMallocAsync memory synchronizes the device: when hrtPoolFree returns, the
// copy that used the block has ended and the block is reusable at once, not pending.
TEST_P(CudaFrees, PoolFreeSynchronizesTheDeviceAndTheBlockIsReusableAtOnce) {
  hrtPool_t pool = nullptr;
  ASSERT_EQ(hrtPoolCreate(&pool, s_, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  void* p = nullptr;
  ASSERT_EQ(hrtPoolMallocAsync(pool, &p, 1024, s_), hrtSuccess);
  std::memset(p, 0x71, 1024);
  slow_copy(p, 1024);
  std::atomic<bool> released{false};
  std::thread releaser = release_later(released);
  EXPECT_EQ(hrtPoolFree(pool, p), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_TRUE(released.load()) << "hrtPoolFree returned while the copy was held";
  EXPECT_EQ(hrtStreamQuery(s_), hrtSuccess) << "hrtPoolFree returned before the copy ended";
  hrtPoolStats st{};
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.pendingFreeBytes, 0u) << "the block still waits for work the free waited for";
  EXPECT_EQ(st.allocatedBytes, 0u);
  releaser.join();
  const std::vector<unsigned char> want(1024, 0x71);
  EXPECT_EQ(first_diff(dst_, want.data(), 1024), -1);
  EXPECT_EQ(hrtPoolDestroy(pool), hrtSuccess);
}

// A failed job before the free is returned by it, as CUDA's frees return earlier launches'
// errors, and the block stays allocated: a retry frees it (the failure is reported once).
TEST_P(CudaFrees, PoolFreeAfterAFailedJobReturnsItAndFreesOnTheRetry) {
  if (!emu()) GTEST_SKIP() << "needs the emulated backend's fault injection";
  hrtPool_t pool = nullptr;
  ASSERT_EQ(hrtPoolCreate(&pool, s_, nullptr), hrtSuccess);
  void* p = nullptr;
  ASSERT_EQ(hrtPoolMallocAsync(pool, &p, 512, s_), hrtSuccess);
  emu()->fail_next_job(-EIO);
  ASSERT_EQ(hrtMemcpyAsync(dst_, p, 512, hrtMemcpyHostToHost, s_), hrtSuccess);
  EXPECT_EQ(hrtPoolFree(pool, p), hrtErrorLaunchFailure);
  hrtPoolStats st{};
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 512u) << "the free failed but freed the block";
  EXPECT_EQ(hrtPoolFree(pool, p), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 0u);
  EXPECT_EQ(hrtPoolDestroy(pool), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaFrees, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
