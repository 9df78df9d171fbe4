// A pool destroyed while blocks are still held, on both backends: as cudaMemPoolDestroy, the
// blocks stay valid, can be copied to and from and freed, and nothing more is allocated.
// Before, PoolBuffer and PoolMemoryResource kept a raw Pool* (a freed Pool read on reset:
// ASan's heap-use-after-free), and hrtPoolDestroy returned the segments of blocks still
// allocated (hrtFreeAsync then failed with "pointer was not allocated from a pool", and a
// copy into the block wrote freed memory).
#include <memory_resource>
#include <optional>
#include <vector>

#include "c_api_fixture.hpp"
#include "hostrt/hostrt.hpp"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class PoolLifetime : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    dev_.emplace(Device::open(0, GetParam()));
    stream_.emplace(dev_->create_stream());
  }
  Device& dev() { return *dev_; }
  Stream& stream() { return *stream_; }
  // The device's copy of n bytes from `from` to `to`, through its buffer.
  void round_trip(const void* from, void* to, std::size_t n) {
    stream().memcpy_async(DevicePtr(0), from, n);
    stream().memcpy_async(to, DevicePtr(0), n);
    stream().synchronize();
  }
  std::optional<Device> dev_;
  std::optional<Stream> stream_;
};

TEST_P(PoolLifetime, APoolBufferOutlivesItsPool) {
  std::optional<Pool> pool;
  pool.emplace(dev(), PoolOptions{.thread_cache_bytes = 0});
  PoolBuffer a = pool->allocate_buffer(3000, stream());
  PoolBuffer b = pool->allocate_buffer(3000, stream());
  fill(a.data(), 3000, 5);
  pool.reset();
  Stream other = dev().create_stream();
  b.record_stream(other);  // reads the pool's access rules: kept with the buffer
  round_trip(a.data(), b.data(), 3000);
  EXPECT_EQ(first_diff(a.data(), b.data(), 3000), -1);
  a.reset();  // frees into the destroyed pool's internals
  b.reset();
}

TEST_P(PoolLifetime, AMemoryResourceFreesAfterItsPoolAndAllocatesNoMore) {
  std::optional<Pool> pool;
  pool.emplace(dev(), PoolOptions{.thread_cache_bytes = 0});
  PoolMemoryResource mr(*pool, &stream());
  std::pmr::vector<int> v(&mr);
  v.assign(1000, 7);
  pool.reset();
  EXPECT_EQ(v[999], 7);
  EXPECT_THROW(v.resize(100000), InvalidArgument) << "a destroyed pool handed out a block";
  v.clear();
  v.shrink_to_fit();  // frees into the destroyed pool's internals
}

// The default pool through a resource without a stream: the resource keeps the device's
// internals, which own the pool, past the Device handle.
TEST_P(PoolLifetime, AResourceOfTheDefaultPoolOutlivesTheDeviceHandle) {
  std::optional<PoolMemoryResource> mr;
  void* p = nullptr;
  {
    Device d = Device::open(0, GetParam());
    mr.emplace(d.default_pool());
    p = mr->allocate(512, 64);
    fill(p, 512, 3);
  }
  std::vector<unsigned char> expected(512);
  fill(expected.data(), 512, 3);
  EXPECT_EQ(first_diff(p, expected.data(), 512), -1);
  mr->deallocate(p, 512, 64);
  mr.reset();
}

class CPoolLifetime : public CApiBackendTest {};

TEST_P(CPoolLifetime, ADestroyedPoolsBlocksStayValidUntilFreed) {
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  hrtPool_t pool = nullptr;
  ASSERT_EQ(hrtPoolCreate(&pool, s, nullptr), hrtSuccess);
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(hrtPoolMallocAsync(pool, &a, 4000, s), hrtSuccess);
  ASSERT_EQ(hrtPoolMallocAsync(pool, &b, 4000, s), hrtSuccess);
  ASSERT_EQ(hrtPoolDestroy(pool), hrtSuccess);
  EXPECT_EQ(hrtPoolMallocAsync(pool, &a, 64, s), hrtErrorInvalidResourceHandle) << "the handle is gone";

  fill(a, 4000, 9);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), a, 4000, hrtMemcpyHostToDevice, s), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(b, hrtDevicePtr(0), 4000, hrtMemcpyDeviceToHost, s), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(s), hrtSuccess);
  EXPECT_EQ(first_diff(a, b, 4000), -1);
  EXPECT_EQ(hrtFreeAsync(a, s), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtFreeAsync(b, s), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtStreamSynchronize(s), hrtSuccess);
  ASSERT_EQ(hrtStreamDestroy(s), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolLifetime, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, CPoolLifetime, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
