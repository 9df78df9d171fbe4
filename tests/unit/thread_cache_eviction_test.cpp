// A free the thread cache has no room for may take the room of smaller cached blocks (they go
// back to the arena) when the thread's last such free was of the same size, so a thread that
// frees and allocates one large size again keeps it warm beside a few small blocks. Never
// for a drifting size, never the other way round, never past the budget, never losing a
// byte of the pool's accounting.
#include <gtest/gtest.h>

#include <vector>

#include "pool_fakes.hpp"

namespace hostrt::test {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

void expect_accounted(const PoolStats& st) {
  EXPECT_EQ(st.reserved_bytes, st.allocated_bytes + st.pending_free_bytes + st.cached_bytes + st.free_bytes);
}

class ThreadCacheEviction : public ::testing::Test {
 protected:
  std::shared_ptr<SourceCounters> src = std::make_shared<SourceCounters>();
  std::shared_ptr<detail::pool::PoolCore> pool = make_fake_pool(src);  // 1 MiB thread cache

  // Parks blocks of these sizes in this thread's cache (allocated together, then freed).
  void park(const std::vector<std::size_t>& sizes) {
    std::vector<void*> held;
    for (std::size_t n : sizes) held.push_back(pool->allocate(n, {}));
    for (void* p : held) pool->deallocate(p, {});
  }
  // A pair of `bytes`: the first free of a size without room is not parked, the second may be.
  void pair(std::size_t bytes) { pool->deallocate(pool->allocate(bytes, {}), {}); }
};

// The 1 MiB pair of pool_bench: the cache already holds smaller blocks (341 KiB of them), so
// before, every 1 MiB free went to the arena and every allocation came back through its lock.
TEST_F(ThreadCacheEviction, ALargeFreeTakesTheRoomOfSmallerCachedBlocks) {
  park({64, 256, 1024, 4096, 16384, 65536, 262144});
  const std::size_t small = pool->stats().cached_bytes;
  ASSERT_EQ(small, 64u + 256 + 1024 + 4096 + 16384 + 65536 + 262144);

  pair(kMiB);
  EXPECT_EQ(pool->stats().cached_bytes, small) << "a size's first free without room evicted";
  void* big = pool->allocate(kMiB, {});
  pool->deallocate(big, {});
  PoolStats st = pool->stats();
  EXPECT_EQ(st.cached_bytes, kMiB) << "the 1 MiB block was not parked (the smaller ones stayed)";
  expect_accounted(st);

  // Warm from now on: the same block comes back from the cache, and goes back to it.
  const std::uint64_t misses = st.misses;
  for (int i = 0; i < 4; ++i) {
    void* again = pool->allocate(kMiB, {});
    EXPECT_EQ(again, big);
    EXPECT_EQ(pool->stats().cached_bytes, 0u) << "round " << i;
    pool->deallocate(again, {});
    EXPECT_EQ(pool->stats().cached_bytes, kMiB) << "round " << i;
  }
  EXPECT_EQ(pool->stats().misses, misses);
  expect_accounted(pool->stats());
}

// Only as much as the block needs goes, largest first: a 384 KiB free in a cache holding three
// 256 KiB blocks and two small ones (255 KiB of room) evicts one 256 KiB block, not the small
// ones (smallest first would take them and still need a 256 KiB one).
TEST_F(ThreadCacheEviction, TheFewestLargestSmallerBlocksGo) {
  constexpr std::size_t k256 = 256 << 10, k384 = 384 << 10;
  park({64, 1024, k256, k256, k256});
  pair(k384);
  void* p = pool->allocate(k384, {});
  pool->deallocate(p, {});
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.cached_bytes, k384 + 2 * k256 + 1024 + 64);
  expect_accounted(st);
  // The small ones are still warm: they come back from the cache.
  void* a = pool->allocate(64, {});
  void* b = pool->allocate(1024, {});
  EXPECT_EQ(pool->stats().cached_bytes, k384 + 2 * k256);
  pool->deallocate(a, {});
  pool->deallocate(b, {});
}

// A small free never evicts a larger block: the 1 MiB block stays, the 64 B one goes to the
// arena (both directions evicting would make a thread alternating the two sizes thrash).
TEST_F(ThreadCacheEviction, ASmallFreeDoesNotEvictALargerBlock) {
  pair(kMiB);
  void* big = pool->allocate(kMiB, {});
  void* small = pool->allocate(64, {});
  pool->deallocate(big, {});
  ASSERT_EQ(pool->stats().cached_bytes, kMiB);
  pool->deallocate(small, {});
  void* again = pool->allocate(64, {});
  pool->deallocate(again, {});  // the same size without room twice
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.cached_bytes, kMiB);
  EXPECT_EQ(st.allocated_bytes, 0u);
  expect_accounted(st);
}

// Sizes creeping up (the growing trace) never repeat, so they evict nothing: each would park a
// block no later request fits.
TEST_F(ThreadCacheEviction, ADriftingSizeEvictsNothing) {
  park({64, 1024, 65536, 262144});
  const std::size_t small = pool->stats().cached_bytes;
  for (std::size_t n = 800 << 10; n < kMiB; n += 256) pair(n);
  EXPECT_EQ(pool->stats().cached_bytes, small);
  expect_accounted(pool->stats());
}

// A block the budget could not hold even when empty, or a cache with thread_cache_bytes = 0,
// evicts nothing.
TEST_F(ThreadCacheEviction, NothingGoesForABlockTheBudgetCannotHold) {
  PoolOptions o;
  o.thread_cache_bytes = 512 << 10;
  pool = make_fake_pool(src, o);
  park({64, 4096});
  pair(kMiB);
  pair(kMiB);
  EXPECT_EQ(pool->stats().cached_bytes, 64u + 4096);

  o.thread_cache_bytes = 0;
  pool = make_fake_pool(src, o);
  void* p = pool->allocate(64, {});
  pool->deallocate(p, {});
  EXPECT_EQ(pool->stats().cached_bytes, 0u);
  expect_accounted(pool->stats());
}

}  // namespace
}  // namespace hostrt::test
