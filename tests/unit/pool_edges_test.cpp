// The pool's edges (issue 13): errors as the standard library and CUDA users expect them,
// limits under concurrency, device resets and closes, thread and process exit, the default
// pool, pointer attributes of blocks.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <exception>
#include <new>
#include <thread>
#include <vector>

#include "hostrt/pool.hpp"
#include "pool_fakes.hpp"

namespace hostrt::test {
namespace {

using detail::pool::PoolCore;

// PoolOutOfMemory is a std::bad_alloc (std::pmr containers and code written for operator new
// expect one) and a hostrt::Error, and catch (std::exception&) still matches it unambiguously.
// Before, it was a std::runtime_error only: catch (std::bad_alloc&) missed it.
TEST(PoolErrorTest, PoolOutOfMemoryIsABadAllocAndAHostrtErrorAndAStdException) {
  auto c = std::make_shared<SourceCounters>();
  Pool pool(std::make_unique<FakeSource>(c), PoolOptions{.max_bytes = 4 << 20});
  int as_bad_alloc = 0, as_error = 0, as_exception = 0, as_out_of_memory = 0;
  try {
    (void)pool.allocate(8 << 20);
  } catch (const std::bad_alloc& e) {
    ++as_bad_alloc;
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
    EXPECT_NE(dynamic_cast<const PoolOutOfMemory*>(&e), nullptr);
  }
  try {
    (void)pool.allocate(8 << 20);
  } catch (const Error& e) {
    ++as_error;
    EXPECT_EQ(e.error_code(), ENOMEM);
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
  }
  try {
    (void)pool.allocate(8 << 20);
  } catch (const std::exception& e) {
    ++as_exception;
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
  }
  try {
    (void)pool.allocate(8 << 20);
  } catch (const OutOfMemory& e) {
    ++as_out_of_memory;
  }
  EXPECT_EQ(as_bad_alloc + as_error + as_exception + as_out_of_memory, 4);
  static_assert(std::is_base_of_v<std::bad_alloc, PoolOutOfMemory>);
  static_assert(std::is_base_of_v<std::exception, PoolOutOfMemory>);
  static_assert(std::is_convertible_v<PoolOutOfMemory*, std::exception*>, "one std::exception base");
  static_assert(std::is_convertible_v<PoolOutOfMemory*, Error*>);
  // The rest of the hierarchy keeps its shape: one std::exception, not a bad_alloc.
  static_assert(std::is_convertible_v<DeviceLost*, std::exception*>);
  static_assert(std::is_convertible_v<DeviceLost*, std::runtime_error*>);
  static_assert(!std::is_base_of_v<std::bad_alloc, DeviceLost>);
  static_assert(std::is_convertible_v<WrongDevice*, InvalidArgument*>);
  try {
    throw_errno(EPROTO, "a protocol error");
  } catch (const std::exception& e) {
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr) << "an unmapped errno is still a hostrt::Error";
  }
}

}  // namespace
}  // namespace hostrt::test
