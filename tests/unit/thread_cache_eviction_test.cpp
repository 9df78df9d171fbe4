// A free the thread cache has no room for may take the room of other cached blocks (they go
// back to the arena) when its size came back without room before, so a thread that frees and
// allocates one large size again keeps it warm beside a few small blocks, and a phase of
// small blocks after a large one gets the cache back. Never for a drifting size, never past
// the budget, never losing a byte of the pool's accounting.
#include <gtest/gtest.h>

#include <vector>

#include "detail/pool/thread_cache.hpp"
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
  // A pair of `bytes`.
  void pair(std::size_t bytes) { pool->deallocate(pool->allocate(bytes, {}), {}); }
  // The frees of a size without room that go to the arena before one may evict.
  static constexpr std::uint32_t kBefore = detail::pool::ThreadCache::kEvictAfter - 1;
  void pairs_before_eviction(std::size_t bytes) {
    for (std::uint32_t i = 0; i < kBefore; ++i) pair(bytes);
  }
};

// The 1 MiB pair of pool_bench: the cache already holds smaller blocks (341 KiB of them), so
// before, every 1 MiB free went to the arena and every allocation came back through its lock.
TEST_F(ThreadCacheEviction, ALargeFreeTakesTheRoomOfSmallerCachedBlocks) {
  park({64, 256, 1024, 4096, 16384, 65536, 262144});
  const std::size_t small = pool->stats().cached_bytes;
  ASSERT_EQ(small, 64u + 256 + 1024 + 4096 + 16384 + 65536 + 262144);

  pairs_before_eviction(kMiB);
  EXPECT_EQ(pool->stats().cached_bytes, small)
      << "a size evicted before it came back " << kBefore << " times";
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
  pairs_before_eviction(k384);
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

// A small size evicts a larger cached block too, but only once it comes back without room:
// after a phase of 1 MiB blocks, a phase of 64 B ones would otherwise go through the arena
// lock for good (pool_bench's two-pool pair after its 1 MiB pair: 15x the single pair).
TEST_F(ThreadCacheEviction, ASmallSizeEvictsAStaleLargerBlockWhenItComesBack) {
  pairs_before_eviction(kMiB);
  void* big = pool->allocate(kMiB, {});
  void* small = pool->allocate(64, {});
  pool->deallocate(big, {});
  ASSERT_EQ(pool->stats().cached_bytes, kMiB);
  pool->deallocate(small, {});
  for (std::uint32_t i = 1; i < kBefore; ++i) pair(64);
  EXPECT_EQ(pool->stats().cached_bytes, kMiB) << "a size evicted before it came back " << kBefore << " times";
  pair(64);  // once more without room
  PoolStats st = pool->stats();
  EXPECT_EQ(st.cached_bytes, 64u) << "the stale 1 MiB block kept the 64 B size off the cache";
  EXPECT_EQ(st.allocated_bytes, 0u);
  expect_accounted(st);
  const std::uint64_t misses = st.misses;
  for (int i = 0; i < 4; ++i) pair(64);
  EXPECT_EQ(pool->stats().cached_bytes, 64u);
  EXPECT_EQ(pool->stats().misses, misses);
}

// Sizes creeping up (the growing trace) never repeat, so they evict nothing: each would park a
// block no later request fits. Nor do sizes that recur among others (two sizes in turn).
TEST_F(ThreadCacheEviction, ADriftingSizeEvictsNothing) {
  park({64, 1024, 65536, 262144});
  const std::size_t small = pool->stats().cached_bytes;
  for (std::size_t n = 800 << 10; n < kMiB; n += 256) pair(n);
  EXPECT_EQ(pool->stats().cached_bytes, small);
  for (int i = 0; i < 4 * static_cast<int>(kBefore); ++i) pair(i % 2 == 0 ? kMiB : 900 << 10);
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
  pairs_before_eviction(kMiB);
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
