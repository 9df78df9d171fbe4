// The pool's C API on the Emulated backend (HOSTRT_BACKEND=emulated): status codes, messages,
// a verified round trip through pool memory, and the refusals.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

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

}  // namespace
}  // namespace hostrt::test
