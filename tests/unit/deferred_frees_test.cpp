// A thread's deferred frees (DeferredFrees): stream-ordered frees whose work has not ended stay
// with the freeing thread, which takes them back without the arena lock. These tests hold what
// that must not cost: reuse safety, and the whole pool (other threads' synchronize, trim, an
// allocation out of memory, the statistics, a thread's exit) still seeing every such block.
#include "detail/pool/deferred_frees.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <semaphore>
#include <set>
#include <thread>
#include <vector>

#include "pool_fakes.hpp"

namespace hostrt::test {
namespace {

// The list itself: a ring whose oldest entry goes without moving the rest. Taking the oldest,
// one in the middle, and sweeping keeps the others in free order, across the ring's wrap.
TEST(DeferredFreesList, TakesKeepTheOthersInFreeOrderAcrossTheWrap) {
  using detail::pool::Block;
  using detail::pool::DeferredFrees;
  constexpr std::size_t kN = DeferredFrees::kSlots;
  std::vector<std::unique_ptr<Block>> blocks;
  for (std::size_t i = 0; i < 3 * kN; ++i) {
    blocks.push_back(std::make_unique<Block>());
    blocks.back()->size = 64 * (i + 1);
  }
  DeferredFrees d;
  std::vector<Block*> model;  // oldest first
  auto listed = [&d] {
    std::vector<Block*> v;
    d.remove_if([&v](Block* b) {
      v.push_back(b);
      return false;
    });
    return v;
  };
  auto bytes_of = [](const std::vector<Block*>& v) {
    std::size_t n = 0;
    for (Block* b : v) n += b->size;
    return n;
  };
  std::size_t next = 0;
  for (int round = 0; round < 6; ++round) {
    while (!d.full()) {
      d.push(blocks[next % blocks.size()].get());
      model.push_back(blocks[next++ % blocks.size()].get());
    }
    // The oldest, then one from the middle, then every third: the ring's head moves round.
    Block* const oldest = model.front();
    d.remove_if([&](Block* b) { return b == oldest; }, true);
    model.erase(model.begin());
    Block* const middle = model[model.size() / 2];
    d.remove_if([&](Block* b) { return b == middle; }, true);
    std::erase(model, middle);
    std::size_t k = 0;
    d.remove_if([&](Block*) { return k++ % 3 == 0; });
    k = 0;
    std::erase_if(model, [&](Block*) { return k++ % 3 == 0; });
    ASSERT_EQ(listed(), model) << "round " << round;
    ASSERT_EQ(d.bytes(), bytes_of(model)) << "round " << round;
  }
}

// Every reserved byte is somewhere: the identity a block lost between lists would break.
void expect_accounted(const PoolStats& st) {
  EXPECT_EQ(st.reserved_bytes, st.allocated_bytes + st.pending_free_bytes + st.cached_bytes + st.free_bytes);
}

// A thread that frees one block on `s` while s's job still reads it, then stays alive (its
// deferred list with it) until release() or destruction.
class Freer {
 public:
  Freer(detail::pool::PoolCore& pool, FakeStream& s, std::size_t bytes, bool exit_at_once = false)
      : t_([&, bytes, exit_at_once] {
          void* p = pool.allocate(bytes, s.ref());
          s.submit();
          pool.deallocate(p, s.ref());
          block_ = p;
          freed_.release();
          if (!exit_at_once) leave_.acquire();
        }) {
    freed_.acquire();
  }
  ~Freer() { release(); }
  void release() {
    if (!t_.joinable()) return;
    leave_.release();
    t_.join();
  }
  void* block() const { return block_; }

 private:
  void* block_ = nullptr;
  std::binary_semaphore freed_{0}, leave_{0};
  std::thread t_;
};

class DeferredFreesTest : public ::testing::Test {
 protected:
  std::shared_ptr<SourceCounters> src = std::make_shared<SourceCounters>();
  FakeStream s1{1};
};

TEST_F(DeferredFreesTest, AThreadsOwnFreeComesBackOnlyOnceItsWorkEnded) {
  auto pool = make_fake_pool(src);  // thread caches (and deferred frees) on
  void* p = pool->allocate(4096, s1.ref());
  s1.submit();
  pool->deallocate(p, s1.ref());
  EXPECT_EQ(pool->stats().pending_free_bytes, 4096u);
  std::vector<void*> got;
  for (int i = 0; i < 8; ++i) got.push_back(pool->allocate(4096, s1.ref()));
  EXPECT_EQ(std::count(got.begin(), got.end(), p), 0) << "reused while the job runs";
  s1.complete_all();
  void* again = pool->allocate(4096, s1.ref());
  EXPECT_EQ(again, p) << "the thread's own ended free is its next block of that size";
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  got.push_back(again);
  for (void* q : got) pool->deallocate(q, s1.ref());
  expect_accounted(pool->stats());
}

TEST_F(DeferredFreesTest, AnotherThreadsSynchronizeAndStatsSeeThem) {
  auto pool = make_fake_pool(src);
  Freer freer(*pool, s1, 4096);
  PoolStats st = pool->stats();
  EXPECT_EQ(st.pending_free_bytes, 4096u) << "a deferred free is pending for the whole pool";
  EXPECT_EQ(st.frees_waited, 1u);
  expect_accounted(st);
  s1.complete_all();
  pool->synchronize();
  st = pool->stats();
  EXPECT_EQ(st.pending_free_bytes, 0u) << "synchronize() reaches other threads' deferred frees";
  expect_accounted(st);
}

TEST_F(DeferredFreesTest, TrimAdoptsThemWithoutReusingThemEarly) {
  auto pool = make_fake_pool(src);
  void* keep = pool->allocate(4096, {});  // the segment stays (an idle one would go to trim)
  Freer freer(*pool, s1, 4096);
  pool->trim(0);  // adopts the free into the shared queues; its job still runs
  std::set<void*> got;
  for (int i = 0; i < 64; ++i) got.insert(pool->allocate(4096, {}));
  EXPECT_EQ(got.count(freer.block()), 0u) << "an adopted free was reused while its job runs";
  EXPECT_EQ(pool->stats().pending_free_bytes, 4096u);
  s1.complete_all();
  pool->synchronize();
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  for (void* q : got) pool->deallocate(q, {});
  pool->deallocate(keep, {});
  expect_accounted(pool->stats());
}

TEST_F(DeferredFreesTest, AnAllocationOutOfMemoryTakesOtherThreadsEndedFrees) {
  auto pool = make_fake_pool(src);
  constexpr std::size_t kBlock = 512 << 10;
  Freer freer(*pool, s1, kBlock);
  // The rest of the segment goes to this thread, and the "driver" allows no more: only the
  // other thread's free can serve the next request.
  const PoolStats st = pool->stats();
  void* rest = pool->allocate(st.free_bytes, {});
  src->refuse_above = src->live_bytes;
  s1.complete_all();
  void* p = nullptr;
  EXPECT_NO_THROW(p = pool->allocate(kBlock, {})) << pool->stats().to_string();
  EXPECT_EQ(p, freer.block());
  if (p != nullptr) pool->deallocate(p, {});
  pool->deallocate(rest, {});
  expect_accounted(pool->stats());
}

TEST_F(DeferredFreesTest, AThreadsExitHandsThemToThePool) {
  auto pool = make_fake_pool(src);
  { Freer freer(*pool, s1, 4096, /*exit_at_once=*/true); }
  PoolStats st = pool->stats();
  EXPECT_EQ(st.pending_free_bytes, 4096u);
  EXPECT_EQ(st.frees_waited, 1u) << "an exited thread's counts stay";
  expect_accounted(st);
  s1.complete_all();
  pool->synchronize();
  st = pool->stats();
  EXPECT_EQ(st.pending_free_bytes, 0u);
  expect_accounted(st);
}

TEST_F(DeferredFreesTest, AFullListMovesToTheSharedQueues) {
  auto pool = make_fake_pool(src);
  constexpr std::size_t kFrees = detail::pool::DeferredFrees::kSlots + 5;
  std::set<void*> freed;
  for (std::size_t i = 0; i < kFrees; ++i) {
    void* p = pool->allocate(64, s1.ref());
    s1.submit();
    pool->deallocate(p, s1.ref());
    freed.insert(p);
  }
  EXPECT_EQ(freed.size(), kFrees) << "a block was reused while its job runs";
  PoolStats st = pool->stats();
  EXPECT_EQ(st.pending_free_bytes, kFrees * 64);
  EXPECT_EQ(st.frees_waited, kFrees);
  expect_accounted(st);
  s1.complete_all();
  pool->synchronize();
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  expect_accounted(pool->stats());
}

}  // namespace
}  // namespace hostrt::test
