// The pool's C API on the Emulated backend (HOSTRT_BACKEND=emulated): status codes, messages,
// a verified round trip through pool memory, and the refusals.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hostrt/hostrt.h"
#include "hostrt/hostrt_pool.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class PoolCApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("HOSTRT_BACKEND", "emulated", 1);
    SKIP_WITHOUT_DEVICE(Backend::Emulated);
    ASSERT_EQ(hrtStreamCreate(&stream), hrtSuccess) << hrtGetLastErrorMessage();
    ASSERT_EQ(hrtPoolCreate(&pool, stream, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  }
  void TearDown() override {
    EXPECT_EQ(hrtPoolDestroy(pool), hrtSuccess);
    if (stream != nullptr) {
      EXPECT_EQ(hrtStreamDestroy(stream), hrtSuccess);
    }
  }
  hrtStream_t stream = nullptr;
  hrtPool_t pool = nullptr;
};

TEST_F(PoolCApiTest, RoundTripThroughPoolMemory) {
  void *src = nullptr, *dst = nullptr;
  ASSERT_EQ(hrtPoolMallocAsync(pool, &src, 3000, stream), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolMallocAsync(pool, &dst, 3000, stream), hrtSuccess);
  fill(src, 3000, 5);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), src, 3000, hrtMemcpyHostToDevice, stream), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(dst, hrtDevicePtr(0), 3000, hrtMemcpyDeviceToHost, stream), hrtSuccess);
  ASSERT_EQ(hrtPoolFreeAsync(pool, src, stream), hrtSuccess);  // stream-ordered: copies may still run
  ASSERT_EQ(hrtStreamSynchronize(stream), hrtSuccess);
  EXPECT_EQ(first_diff(dst, pattern(3000, 5).data(), 3000), -1);
  ASSERT_EQ(hrtPoolFree(pool, dst), hrtSuccess);  // on its home stream
  hrtPoolStats st{};
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 0u);
  EXPECT_EQ(st.allocations, 2u);
  EXPECT_EQ(st.misses, 1u);
  ASSERT_EQ(hrtPoolSynchronize(pool), hrtSuccess);
  size_t released = 0;
  ASSERT_EQ(hrtPoolTrimTo(pool, 0, &released), hrtSuccess);
  EXPECT_EQ(released, st.reservedBytes);
}

TEST_F(PoolCApiTest, RefusalsCarryACodeAndAMessage) {
  void* p = nullptr;
  EXPECT_EQ(hrtPoolMallocAsync(nullptr, &p, 64, stream), hrtErrorInvalidValue);
  EXPECT_EQ(hrtGetLastError(), hrtErrorInvalidValue) << "shares the runtime's last error";
  EXPECT_EQ(hrtPoolMallocAsync(pool, &p, 64, reinterpret_cast<hrtStream_t>(&p)),
            hrtErrorInvalidResourceHandle);
  int local = 0;
  EXPECT_EQ(hrtPoolFree(pool, &local), hrtErrorInvalidValue);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("hrtPoolFree"), std::string::npos);
  ASSERT_EQ(hrtPoolMalloc(pool, &p, 100), hrtSuccess);
  ASSERT_EQ(hrtPoolFree(pool, p), hrtSuccess);
  EXPECT_EQ(hrtPoolFree(pool, p), hrtErrorInvalidValue) << "double free";
  EXPECT_EQ(hrtPoolGetStats(pool, nullptr), hrtErrorInvalidValue);
}

TEST_F(PoolCApiTest, NullIsTheDefaultStream) {
  void *p = nullptr, *dst = nullptr;
  ASSERT_EQ(hrtPoolMallocAsync(pool, &p, 2000, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolMalloc(pool, &dst, 2000), hrtSuccess);
  fill(p, 2000, 9);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), p, 2000, hrtMemcpyHostToDevice, nullptr), hrtSuccess);
  ASSERT_EQ(hrtPoolFreeAsync(pool, p, nullptr), hrtSuccess);  // ordered after that copy
  ASSERT_EQ(hrtMemcpyAsync(dst, hrtDevicePtr(0), 2000, hrtMemcpyDeviceToHost, nullptr), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess);
  EXPECT_EQ(first_diff(dst, pattern(2000, 9).data(), 2000), -1);
  ASSERT_EQ(hrtPoolFree(pool, dst), hrtSuccess);
}

TEST_F(PoolCApiTest, ByteLimitGivesMemoryAllocationError) {
  hrtPool_t small = nullptr;
  hrtPoolProps props{};
  props.maxBytes = 4 << 20;
  ASSERT_EQ(hrtPoolCreate(&small, nullptr, &props), hrtSuccess) << hrtGetLastErrorMessage();
  void* p = nullptr;
  EXPECT_EQ(hrtPoolMalloc(small, &p, 8 << 20), hrtErrorMemoryAllocation);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("max_bytes"), std::string::npos)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtPoolDestroy(small), hrtSuccess);
}

// After a 40 MiB block, two of 1.1 MiB: a segment each by default; with sharedLargeSegments
// both come from one geometric step (2.5 MiB).
TEST_F(PoolCApiTest, SharedLargeSegmentsIsHonoured) {
  for (int shared : {0, 1}) {
    hrtPool_t p = nullptr;
    hrtPoolProps props{};
    props.sharedLargeSegments = shared;
    ASSERT_EQ(hrtPoolCreate(&p, nullptr, &props), hrtSuccess) << hrtGetLastErrorMessage();
    std::vector<void*> v;
    for (std::size_t n : {std::size_t{40} << 20, (std::size_t{1} << 20) + (100 << 10),
                          (std::size_t{1} << 20) + (100 << 10)}) {
      void* q = nullptr;
      ASSERT_EQ(hrtPoolMalloc(p, &q, n), hrtSuccess) << hrtGetLastErrorMessage();
      v.push_back(q);
    }
    hrtPoolStats st{};
    ASSERT_EQ(hrtPoolGetStats(p, &st), hrtSuccess) << hrtGetLastErrorMessage();
    EXPECT_EQ(st.largeSegments, shared ? 2u : 3u) << "sharedLargeSegments=" << shared;
    for (void* q : v) EXPECT_EQ(hrtPoolFree(p, q), hrtSuccess);
    EXPECT_EQ(hrtPoolDestroy(p), hrtSuccess);
  }
}

// Pool and registration-cache handles are validated like stream and event handles: a
// destroyed one is refused (before: a second destroy deleted it again).
TEST_F(PoolCApiTest, DestroyedHandlesAreRefused) {
  hrtPool_t p = nullptr;
  ASSERT_EQ(hrtPoolCreate(&p, stream, nullptr), hrtSuccess);
  ASSERT_EQ(hrtPoolDestroy(p), hrtSuccess);
  EXPECT_EQ(hrtPoolDestroy(p), hrtErrorInvalidResourceHandle) << "double destroy";
  void* q = nullptr;
  EXPECT_EQ(hrtPoolMalloc(p, &q, 64), hrtErrorInvalidResourceHandle);
  hrtRegCache_t c = nullptr;
  ASSERT_EQ(hrtRegCacheCreate(&c, stream, 0), hrtSuccess);
  ASSERT_EQ(hrtRegCacheDestroy(c), hrtSuccess);
  EXPECT_EQ(hrtRegCacheDestroy(c), hrtErrorInvalidResourceHandle) << "double destroy";
  hrtRegCacheStats st{};
  EXPECT_EQ(hrtRegCacheGetStats(c, &st), hrtErrorInvalidResourceHandle);
}

// hrtPoolRecordStream, hrtPoolReserve and hrtPoolSetRetainBytes, which no test called.
// (No thread cache, so the freed block is back in its segment, which is then idle.)
TEST_F(PoolCApiTest, RecordStreamReserveAndRetainBytes) {
  hrtPoolProps props{};
  props.disableThreadCache = 1;
  ASSERT_EQ(hrtPoolDestroy(pool), hrtSuccess);
  ASSERT_EQ(hrtPoolCreate(&pool, stream, &props), hrtSuccess);
  ASSERT_EQ(hrtPoolReserve(pool, 0, 4 << 20), hrtSuccess) << hrtGetLastErrorMessage();
  hrtPoolStats st{};
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.reservedBytes, std::size_t{4} << 20);
  EXPECT_EQ(st.misses, 1u);
  hrtStream_t other = nullptr;
  ASSERT_EQ(hrtStreamCreate(&other), hrtSuccess);
  void* p = nullptr;
  ASSERT_EQ(hrtPoolMallocAsync(pool, &p, 2000, stream), hrtSuccess);
  fill(p, 2000, 1);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), p, 2000, hrtMemcpyHostToDevice, other), hrtSuccess);
  ASSERT_EQ(hrtPoolRecordStream(pool, p, other), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtPoolRecordStream(pool, nullptr, other), hrtErrorInvalidValue);
  ASSERT_EQ(hrtStreamDestroy(other), hrtSuccess) << "the pool keeps the recorded stream alive";
  ASSERT_EQ(hrtPoolFreeAsync(pool, p, stream), hrtSuccess);
  ASSERT_EQ(hrtPoolSynchronize(pool), hrtSuccess);
  ASSERT_EQ(hrtPoolSetRetainBytes(pool, 0), hrtSuccess);
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.reservedBytes, 0u) << "retaining 0 bytes releases every idle segment";
  EXPECT_EQ(st.segmentsReleased, 1u);
}

// hrtPoolProps.size: with it set, retainBytes 0 returns every idle segment (before, 0
// could only mean "keep all"); a zero-initialised struct keeps the old meaning. Peaks restart
// from the current values on hrtPoolResetPeakStats.
TEST_F(PoolCApiTest, PropsSizeMakesAZeroRetainBytesMeanReleaseAll) {
  for (std::size_t size : {sizeof(hrtPoolProps), std::size_t{0}}) {
    hrtPool_t p = nullptr;
    hrtPoolProps props{};
    props.size = size;
    props.disableThreadCache = 1;
    ASSERT_EQ(hrtPoolCreate(&p, stream, &props), hrtSuccess) << hrtGetLastErrorMessage();
    void* q = nullptr;
    ASSERT_EQ(hrtPoolMalloc(p, &q, 3 << 20), hrtSuccess);
    ASSERT_EQ(hrtPoolFree(p, q), hrtSuccess);
    hrtPoolStats st{};
    ASSERT_EQ(hrtPoolGetStats(p, &st), hrtSuccess);
    EXPECT_EQ(st.reservedBytes, size != 0 ? 0u : std::size_t{3} << 20) << "props.size " << size;
    EXPECT_EQ(st.peakAllocatedBytes, std::size_t{3} << 20);
    ASSERT_EQ(hrtPoolResetPeakStats(p), hrtSuccess);
    ASSERT_EQ(hrtPoolGetStats(p, &st), hrtSuccess);
    EXPECT_EQ(st.peakAllocatedBytes, 0u);
    EXPECT_EQ(st.peakReservedBytes, st.reservedBytes);
    EXPECT_EQ(hrtPoolDestroy(p), hrtSuccess);
  }
  hrtPoolProps bad{};
  bad.size = 3;
  hrtPool_t p = nullptr;
  EXPECT_EQ(hrtPoolCreate(&p, stream, &bad), hrtErrorInvalidValue);
}

hrtMemoryType type_of(const void* p) {
  hrtPointerAttributes a{};
  EXPECT_EQ(hrtPointerGetAttributes(&a, p), hrtSuccess) << hrtGetLastErrorMessage();
  return a.type;
}

TEST_F(PoolCApiTest, RegistrationCacheRegistersOnceAndCarriesCopies) {
  std::vector<unsigned char> user(1 << 16), back(8192);
  hrtRegCache_t cache = nullptr;
  ASSERT_EQ(hrtRegCacheCreate(&cache, stream, hrtHostRegisterDefault), hrtSuccess)
      << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtRegCacheAcquire(cache, user.data(), user.size()), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtRegCacheAcquire(cache, user.data() + 4096, 8192), hrtSuccess) << "inside: a reference";
  hrtRegCacheStats st{};
  ASSERT_EQ(hrtRegCacheGetStats(cache, &st), hrtSuccess);
  EXPECT_EQ(st.registrations, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(type_of(user.data() + 5000), hrtMemoryTypeRegistered);

  // The acquired sub-range carries a device round trip (registered, not bounced).
  // (The device buffer holds 4 KiB: a 2000-byte round trip.)
  fill(user.data() + 4096, 2000, 3);
  ASSERT_EQ(hrtRegCacheAcquire(cache, back.data(), back.size()), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), user.data() + 4096, 2000, hrtMemcpyHostToDevice, stream),
            hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(back.data(), hrtDevicePtr(0), 2000, hrtMemcpyDeviceToHost, stream), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(stream), hrtSuccess);
  EXPECT_EQ(first_diff(back.data(), pattern(2000, 3).data(), 2000), -1);

  // Released ranges stay registered (idle) until evicted.
  ASSERT_EQ(hrtRegCacheRelease(cache, user.data() + 4096, 8192), hrtSuccess);
  ASSERT_EQ(hrtRegCacheRelease(cache, user.data(), user.size()), hrtSuccess);
  EXPECT_EQ(type_of(user.data()), hrtMemoryTypeRegistered);
  size_t evicted = 0;
  ASSERT_EQ(hrtRegCacheEvictIdle(cache, &evicted), hrtSuccess);
  EXPECT_EQ(evicted, 1u) << "the range of `back` is still acquired";
  EXPECT_EQ(type_of(user.data()), hrtMemoryTypePageable);
  EXPECT_EQ(type_of(back.data()), hrtMemoryTypeRegistered);
  // Destroying the cache releases and unregisters what is still acquired.
  ASSERT_EQ(hrtRegCacheDestroy(cache), hrtSuccess);
  EXPECT_EQ(type_of(back.data()), hrtMemoryTypePageable);
}

TEST_F(PoolCApiTest, RegistrationCacheRefusals) {
  std::vector<unsigned char> user(1 << 16);
  hrtRegCache_t cache = nullptr;
  EXPECT_EQ(hrtRegCacheCreate(nullptr, stream, 0), hrtErrorInvalidValue);
  EXPECT_EQ(hrtRegCacheCreate(&cache, stream, 0x80u), hrtErrorInvalidValue) << "unknown flag";
  ASSERT_EQ(hrtRegCacheCreate(&cache, stream, hrtHostRegisterReadOnly), hrtSuccess)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtRegCacheAcquire(nullptr, user.data(), 64), hrtErrorInvalidValue);
  EXPECT_EQ(hrtRegCacheRelease(cache, user.data(), 64), hrtErrorInvalidValue) << "never acquired";
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("hrtRegCacheRelease"), std::string::npos);
  ASSERT_EQ(hrtRegCacheAcquire(cache, user.data(), 8192), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtRegCacheAcquire(cache, user.data() + 4096, 8192), hrtErrorHostMemoryAlreadyRegistered)
      << "overlaps a range in use without lying inside it";
  EXPECT_EQ(hrtRegCacheRelease(cache, user.data(), 4096), hrtErrorInvalidValue) << "not the acquired size";
  // Read-only registration: the device may not write into it.
  EXPECT_EQ(hrtMemcpyAsync(user.data(), hrtDevicePtr(0), 64, hrtMemcpyDeviceToHost, stream),
            hrtErrorInvalidValue);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("read-only"), std::string::npos)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtRegCacheGetStats(cache, nullptr), hrtErrorInvalidValue);
  EXPECT_EQ(hrtRegCacheDestroy(cache), hrtSuccess);
  EXPECT_EQ(hrtRegCacheDestroy(nullptr), hrtSuccess);
}

}  // namespace
}  // namespace hostrt::test
