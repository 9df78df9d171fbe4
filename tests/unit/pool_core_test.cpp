// The pool's rules, one scenario each, on fake streams and a fake segment source so that
// completion happens exactly when the test says.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pool_fakes.hpp"

namespace hostrt::test {
namespace {

using detail::pool::PoolCore;

class PoolCoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<SourceCounters> src = std::make_shared<SourceCounters>();
  FakeStream s1{1}, s2{2};
};

TEST_F(PoolCoreTest, RoundsTo64AndAligns) {
  auto pool = make_fake_pool(src);
  for (std::size_t n : {0, 1, 63, 64, 65, 1000, 1025, 4097, 65537, (1 << 20) + 1, (3 << 20) + 5}) {
    void* p = pool->allocate(n, {});
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << n;
    const std::size_t want = n == 0 ? 64 : (n + 63) / 64 * 64;
    EXPECT_EQ(pool->block_size(p), want) << "no power-of-two rounding for " << n;
    pool->deallocate(p, {});
  }
}

TEST_F(PoolCoreTest, ForeignPointerAndDoubleFreeAreRejected) {
  auto pool = make_fake_pool(src);
  int local = 0;
  EXPECT_THROW(pool->deallocate(&local, {}), InvalidArgument);
  void* p = pool->allocate(100, {});
  EXPECT_THROW(pool->deallocate(static_cast<char*>(p) + 64, {}), InvalidArgument);
  pool->deallocate(p, {});
  EXPECT_THROW(pool->deallocate(p, {}), InvalidArgument);
  EXPECT_THROW(pool->allocate(std::size_t{1} << 60, {}), InvalidArgument);
}

TEST_F(PoolCoreTest, FreedBlockIsNotReusedBeforeItsStreamReachesThePoint) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* p = pool->allocate(4096, s1.ref());
  const std::uint64_t job = s1.submit();  // the device reads p
  pool->deallocate(p, s1.ref());
  EXPECT_EQ(pool->stats().pending_free_bytes, 4096u);
  std::set<void*> got;
  for (int i = 0; i < 64; ++i) got.insert(pool->allocate(4096, {}));
  EXPECT_EQ(got.count(p), 0u) << "reused while the job runs";
  s1.complete_to(job);
  void* q = pool->allocate(4096, {});
  for (int i = 0; i < 64 && q != p; ++i) q = pool->allocate(4096, {});
  EXPECT_EQ(q, p) << "reusable once the completion page says so";
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  EXPECT_EQ(s1.waits(), 0u) << "no blocking wait was needed";
}

TEST_F(PoolCoreTest, ASlowStreamDoesNotDelayBlocksFreedOnAnother) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* a = pool->allocate(1 << 16, s1.ref());
  void* b = pool->allocate(1 << 16, s2.ref());
  s1.submit();  // never completes in this test
  const auto j2 = s2.submit();
  pool->deallocate(a, s1.ref());
  pool->deallocate(b, s2.ref());
  s2.complete_to(j2);
  void* c = pool->allocate(1 << 16, {});
  EXPECT_EQ(c, b);
  EXPECT_EQ(pool->stats().pending_free_bytes, std::size_t{1} << 16);
}

TEST_F(PoolCoreTest, RecordStreamMakesTheFreeWaitForTheOtherStreamToo) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* p = pool->allocate(8192, s1.ref());
  const auto j1 = s1.submit();
  pool->record_stream(p, s2.ref());
  const auto j2 = s2.submit();
  pool->deallocate(p, {});  // home stream s1
  s1.complete_to(j1);
  for (int i = 0; i < 8; ++i) EXPECT_NE(pool->allocate(8192, {}), p);
  s2.complete_to(j2);
  bool seen = false;
  for (int i = 0; i < 8 && !seen; ++i) seen = pool->allocate(8192, {}) == p;
  EXPECT_TRUE(seen);
}

// cudaStreamWaitEvent(s2, e) with e recorded behind s1's use of the block, then a free on s2
// with no work on s2 since: the free is ordered after e, so the block waits for s1's job.
// Thread caches on: the warm free path must see the queued wait too. Before, s2 looked idle
// and the block was reused at once.
TEST_F(PoolCoreTest, AFreeOrderedAfterAnEventWaitWaitsForTheEventsWork) {
  auto pool = make_fake_pool(src);
  void* p = pool->allocate(256, s2.ref());
  const auto j1 = s1.submit();  // s1's job reads p
  s2.wait_for(s1, j1);          // s2 waits for an event recorded after j1
  pool->deallocate(p, s2.ref());
  EXPECT_EQ(pool->stats().pending_free_bytes, 256u) << "reusable before s1's job ended";
  void* q = pool->allocate(256, {});
  EXPECT_NE(q, p);
  s1.complete_to(j1);
  pool->deallocate(q, {});
  void* r = pool->allocate(100000, {});  // a slow-path call reclaims
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u) << "reusable once s1 reached the point";
  pool->deallocate(r, {});
  EXPECT_EQ(s1.waits(), 0u);
  // Once s2 submits, its job carries the wait and a free on s2 waits for that job alone.
  void* t = pool->allocate(256, s2.ref());
  s2.wait_for(s1, s1.submit());
  const auto j2 = s2.submit();
  pool->deallocate(t, s2.ref());
  EXPECT_EQ(pool->stats().pending_free_bytes, 256u);
  s2.complete_to(j2);
  pool->synchronize();
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
}

TEST_F(PoolCoreTest, IdleStreamMeansImmediateReuseThroughTheThreadCache) {
  auto pool = make_fake_pool(src);
  void* p = pool->allocate(256, s1.ref());
  pool->deallocate(p, s1.ref());  // nothing submitted: reusable at once
  EXPECT_EQ(pool->allocate(256, s1.ref()), p);
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.frees_waited, 0u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, 1u);
}

TEST_F(PoolCoreTest, SyncOnFreeWaitsAndSurfacesADeviceFault) {
  PoolOptions o;
  o.sync_on_free = true;
  auto pool = make_fake_pool(src, o);
  void* p = pool->allocate(128, s1.ref());
  const auto job = s1.submit();
  pool->deallocate(p, s1.ref());
  EXPECT_EQ(s1.waits(), 1u);
  EXPECT_GE(s1.completed(), job);
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  void* q = pool->allocate(128, s1.ref());
  s1.submit();
  s1.fail_next_wait();
  // The failure is the stream's to report, at its synchronize: a free that threw after
  // freeing would invite a retry that frees whatever took the block's place.
  EXPECT_NO_THROW(pool->deallocate(q, s1.ref()));
  EXPECT_EQ(pool->stats().allocated_bytes, 0u) << "the job failed but it has ended: the block is free";
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  EXPECT_THROW(s1.user_wait(s1.submitted()), DeviceFault) << "left for the user's own synchronize";
}

// sync_on_free: a wait that fails without the job ending (DeviceLost) is not a completion.
// Before, the block was freed as if the work had ended and handed out at once.
TEST_F(PoolCoreTest, SyncOnFreeNeverTakesAFailedWaitForCompletion) {
  PoolOptions o;
  o.sync_on_free = true;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* p = pool->allocate(128, s1.ref());
  const auto job = s1.submit();
  s1.lose_next_wait();
  EXPECT_NO_THROW(pool->deallocate(p, s1.ref())) << "the block is freed, stream-ordered";
  EXPECT_LT(s1.completed(), job);
  EXPECT_EQ(pool->stats().pending_free_bytes, 128u) << "freed although its job may still run";
  EXPECT_NE(pool->allocate(128, {}), p);
  s1.complete_to(job);
  pool->synchronize();
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
}

TEST_F(PoolCoreTest, CoalescesNeighboursIntoOneBlock) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* a = pool->allocate(1 << 19, {});
  void* b = pool->allocate(1 << 19, {});
  void* c = pool->allocate(1 << 19, {});
  void* d = pool->allocate(1 << 19, {});  // the 2 MiB segment is now full
  EXPECT_EQ(pool->stats().segments, 1u);
  pool->deallocate(b, {});
  pool->deallocate(a, {});
  pool->deallocate(c, {});
  // a, b and c merged into one 1.5 MiB hole: a 768 KiB request (a small one) fits only there.
  void* x = pool->allocate(3 << 18, {});
  EXPECT_EQ(x, a) << "best fit found the merged hole at the segment start";
  EXPECT_EQ(pool->stats().segments, 1u);
  pool->deallocate(x, {});
  pool->deallocate(d, {});
  EXPECT_EQ(pool->stats().free_bytes, std::size_t{2} << 20);
}

TEST_F(PoolCoreTest, SmallAndLargeRequestsUseSeparateSegments) {
  auto pool = make_fake_pool(src);
  void* big = pool->allocate(3 << 20, {});
  void* small = pool->allocate(100, {});
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.small_segments, 1u);
  EXPECT_EQ(st.large_segments, 1u);
  const auto bb = reinterpret_cast<std::uintptr_t>(big), sb = reinterpret_cast<std::uintptr_t>(small);
  EXPECT_TRUE(sb < bb || sb >= bb + (3u << 20));
  pool->deallocate(big, {});
  pool->deallocate(small, {});
}

TEST_F(PoolCoreTest, LargeMissGetsAnExactSegmentAndSmallGrowthIsGeometric) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* h = pool->allocate((100 << 20) + 64, {});
  EXPECT_EQ(src->last_request, std::size_t{100 << 20} + 4096) << "exact, page-rounded";
  void* l = pool->allocate(3 << 20, {});
  EXPECT_EQ(src->last_request, std::size_t{3} << 20) << "every large miss is exact";
  // With ~103 MiB reserved the next small step is reserved/16, rounded up to 64 KiB.
  void* s = pool->allocate(100, {});
  EXPECT_EQ(src->last_request, ((std::size_t{103 << 20} + 4096) / 16 + 65535) / 65536 * 65536);
  pool->deallocate(h, {});
  pool->deallocate(l, {});
  pool->deallocate(s, {});
}

TEST_F(PoolCoreTest, SharedLargeSegmentsGrowGeometricallyAndSplit) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  o.shared_large_segments = true;
  auto pool = make_fake_pool(src, o);
  void* h = pool->allocate((100 << 20) + 64, {});
  EXPECT_EQ(src->last_request, std::size_t{100 << 20} + 4096) << "above the step: exact";
  // With ~100 MiB reserved the next step is reserved/16, rounded up to 64 KiB.
  void* l = pool->allocate(3 << 20, {});
  EXPECT_EQ(src->last_request, ((std::size_t{100 << 20} + 4096) / 16 + 65535) / 65536 * 65536);
  void* m = pool->allocate(2 << 20, {});
  EXPECT_EQ(src->allocations, 2u) << "split from the same segment";
  for (void* p : {h, l, m}) pool->deallocate(p, {});
}

// A large block freed at random must leave no hole: its segment is its own, reused whole by a
// request that wastes at most an eighth of it, and never split by a smaller one.
TEST_F(PoolCoreTest, DedicatedSegmentIsReusedWholeWithinAnEighthAndNeverSplit) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* a = pool->allocate(8 << 20, {});
  void* z = pool->allocate(16 << 20, {});  // keeps the high-water mark above what follows
  pool->deallocate(a, {});
  void* b = pool->allocate((7 << 20) + 512 * 1024, {});  // wastes 1/15 of the request: reused
  EXPECT_EQ(b, a);
  EXPECT_EQ(pool->block_size(b), (std::size_t{7} << 20) + 512 * 1024) << "64-byte rounding only";
  EXPECT_EQ(src->allocations, 2u);
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.reserved_bytes, st.allocated_bytes + st.free_bytes) << "the tail counts as free";
  pool->deallocate(b, {});
  pool->deallocate(z, {});
  void* c = pool->allocate(4 << 20, {});  // would waste half of a: a segment of its own
  EXPECT_NE(c, a);
  EXPECT_EQ(src->allocations, 3u);
  void* d = pool->allocate(100, {});  // small: never carved out of the idle 8 MiB segment
  const auto da = reinterpret_cast<std::uintptr_t>(d), aa = reinterpret_cast<std::uintptr_t>(a);
  EXPECT_TRUE(da < aa || da >= aa + (8u << 20));
  void* e = pool->allocate(8 << 20, {});
  EXPECT_EQ(e, a) << "still whole";
  for (void* p : {c, d, e}) pool->deallocate(p, {});
}

// A driver that rounds segments up (here to 4 MiB) must not make a dedicated segment refuse
// the request it was made for: before, the pool grew forever.
TEST_F(PoolCoreTest, OversizedSegmentFromTheSourceIsSharedNotDedicated) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  src->round_to = 4 << 20;
  auto pool = make_fake_pool(src, o);
  void* a = pool->allocate((1 << 20) + 4096, {});
  EXPECT_EQ(src->allocations, 1u);
  void* b = pool->allocate(2 << 20, {});
  EXPECT_EQ(src->allocations, 1u) << "split from the shared 4 MiB segment";
  pool->deallocate(a, {});
  pool->deallocate(b, {});
}

// Idle segments that cannot serve a miss stay cached while the pool is under its high-water
// mark, and go back to the driver first when the growth would raise it.
TEST_F(PoolCoreTest, MissReleasesIdleSegmentsOnlyToStayUnderThePeak) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* a = pool->allocate(8 << 20, {});
  void* b = pool->allocate(2 << 20, {});
  pool->deallocate(b, {});
  pool->deallocate(a, {});
  void* c = pool->allocate(4 << 20, {});  // fits neither; 4 + 10 > 10: the 8 MiB goes first
  EXPECT_EQ(pool->stats().segments_released, 1u);
  EXPECT_EQ(pool->stats().reserved_bytes, std::size_t{6} << 20) << "the idle 2 MiB stays cached";
  EXPECT_EQ(pool->stats().peak_reserved_bytes, std::size_t{10} << 20);
  void* d = pool->allocate(3 << 20, {});  // 6 + 3 <= 10: grows without releasing
  EXPECT_EQ(pool->stats().segments_released, 1u);
  EXPECT_EQ(pool->stats().reserved_bytes, std::size_t{9} << 20);
  pool->deallocate(c, {});
  pool->deallocate(d, {});
}

// A miss among small segments that are already more than 1/16 free is fragmentation: it
// grows by min_segment/16 (or the request), not by a geometric step of mostly free space.
TEST_F(PoolCoreTest, FragmentedSmallSegmentsGrowByASmallStep) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  std::vector<void*> v;
  for (int i = 0; i < 32; ++i) v.push_back(pool->allocate(64 << 10, {}));  // fills 2 MiB
  EXPECT_EQ(src->allocations, 1u);
  for (int i = 0; i < 32; i += 2) pool->deallocate(v[i], {});  // 1 MiB free, in 64 KiB holes
  void* big = pool->allocate(200 << 10, {});
  EXPECT_EQ(src->allocations, 2u);
  EXPECT_EQ(src->last_request, std::size_t{200} << 10) << "the request, above min_segment/16";
  void* more = pool->allocate(100 << 10, {});
  EXPECT_EQ(src->last_request, std::size_t{128} << 10) << "min_segment/16";
  pool->deallocate(big, {});
  pool->deallocate(more, {});
  for (int i = 1; i < 32; i += 2) pool->deallocate(v[i], {});
}

TEST_F(PoolCoreTest, TrimAndRetainBytesReturnIdleSegments) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  std::vector<void*> v;
  for (int i = 0; i < 6; ++i) v.push_back(pool->allocate(5 << 20, {}));
  const std::size_t reserved = pool->stats().reserved_bytes;
  EXPECT_EQ(src->live_bytes, reserved);
  pool->deallocate(v[0], {});
  EXPECT_EQ(pool->trim(reserved), 0u) << "keep_bytes is honoured";
  EXPECT_GT(pool->trim(0), 0u);
  EXPECT_LT(pool->stats().reserved_bytes, reserved);
  EXPECT_EQ(src->live_bytes, pool->stats().reserved_bytes);
  pool->set_retain_bytes(0);
  for (std::size_t i = 1; i < v.size(); ++i) pool->deallocate(v[i], {});
  EXPECT_EQ(pool->stats().reserved_bytes, 0u) << "retaining 0 bytes releases each idle segment";
  EXPECT_EQ(src->live_bytes, 0u);
  EXPECT_EQ(pool->stats().segments_released, 6u);
}

TEST_F(PoolCoreTest, ReserveAvoidsDriverCallsLater) {
  auto pool = make_fake_pool(src);
  pool->reserve(32 << 20, 4 << 20);
  const std::size_t calls = src->allocations;
  std::vector<void*> v;
  for (int i = 0; i < 4; ++i) v.push_back(pool->allocate(1 << 20, {}));
  for (int i = 0; i < 10; ++i) v.push_back(pool->allocate(2 << 20, {}));
  EXPECT_EQ(src->allocations, calls);
  for (void* p : v) pool->deallocate(p, {});
}

TEST_F(PoolCoreTest, OutOfMemoryWaitsForOldestPendingThenThrowsWithStats) {
  PoolOptions o;
  o.max_bytes = 4 << 20;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* a = pool->allocate(2 << 20, s1.ref());
  void* b = pool->allocate(2 << 20, s2.ref());
  s1.submit();
  s2.submit();
  pool->deallocate(a, s1.ref());  // oldest pending
  pool->deallocate(b, s2.ref());
  void* c = pool->allocate(2 << 20, {});  // at the limit: must wait for a's job
  EXPECT_EQ(c, a);
  EXPECT_EQ(s1.waits(), 1u);
  EXPECT_EQ(s2.waits(), 0u) << "only the oldest pending work is waited for";
  void* d = pool->allocate(2 << 20, {});
  EXPECT_EQ(d, b);
  try {
    pool->allocate(64, {});
    FAIL() << "expected PoolOutOfMemory";
  } catch (const PoolOutOfMemory& e) {
    EXPECT_EQ(e.stats().reserved_bytes, std::size_t{4} << 20);
    EXPECT_EQ(e.stats().allocated_bytes, std::size_t{4} << 20);
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
  }
  pool->deallocate(c, {});
  pool->deallocate(d, {});
}

TEST_F(PoolCoreTest, DriverRefusalReleasesIdleSegmentsOfTheOtherClassFirst) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* s = pool->allocate(64, {});
  pool->deallocate(s, {});  // an idle 2 MiB small segment
  src->refuse_above = 4 << 20;
  void* big = pool->allocate(3 << 20, {});  // 2 + 3 MiB > 4: only after the idle one goes
  EXPECT_EQ(pool->stats().small_segments, 0u);
  EXPECT_EQ(pool->stats().segments_released, 1u);
  EXPECT_THROW(pool->allocate(3 << 20, {}), PoolOutOfMemory);
  pool->deallocate(big, {});
}

TEST_F(PoolCoreTest, SynchronizeWaitsForEveryStreamAndDrainsPending) {
  auto pool = make_fake_pool(src);
  for (int i = 0; i < 10; ++i) {
    FakeStream& s = i % 2 ? s1 : s2;
    void* p = pool->allocate(1000 * (i + 1), s.ref());
    s.submit();
    if (i % 3 == 0) {
      pool->record_stream(p, (i % 2 ? s2 : s1).ref());
      (i % 2 ? s2 : s1).submit();
    }
    pool->deallocate(p, {});
  }
  EXPECT_GT(pool->stats().pending_free_bytes, 0u);
  pool->synchronize();
  EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  EXPECT_EQ(s1.completed(), s1.submitted());
  EXPECT_EQ(s2.completed(), s2.submitted());
  EXPECT_EQ(pool->trim(0), pool->stats().peak_reserved_bytes);
  EXPECT_EQ(src->live_bytes, 0u);
}

// PyTorch's record_stream from two threads on one tensor: both uses must count. Before, the
// block's vectors were pushed to without a lock (a lost record is an early reuse; TSan sees
// the race, and a reallocation racing a push loses entries or crashes).
TEST_F(PoolCoreTest, RecordStreamFromTwoThreadsOnOneBlockKeepsEveryUse) {
  PoolOptions o;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  constexpr int kPerThread = 24;
  std::vector<std::unique_ptr<FakeStream>> streams;
  for (int i = 0; i < 2 * kPerThread; ++i) streams.push_back(std::make_unique<FakeStream>(500 + i));
  for (int round = 0; round < 100; ++round) {
    void* p = pool->allocate(256, {});
    for (auto& s : streams) s->submit();
    std::atomic<int> ready{0};
    auto record = [&](int parity) {
      ready.fetch_add(1);
      while (ready.load() < 2) {  // start together: the race needs overlap
      }
      for (int i = 0; i < kPerThread; ++i) pool->record_stream(p, streams[2 * i + parity]->ref());
    };
    std::thread other(record, 1);
    record(0);
    other.join();
    pool->deallocate(p, {});
    // Complete the streams one by one: the block stays pending until the last.
    for (std::size_t i = 0; i < streams.size(); ++i) {
      ASSERT_EQ(pool->stats().pending_free_bytes, 256u)
          << "round " << round << ": reusable with " << streams.size() - i
          << " recorded streams still running";
      streams[i]->complete_all();
      pool->trim(~std::size_t{0});  // reclaims what is reachable
    }
    EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
  }
}

TEST_F(PoolCoreTest, ThePoolsOwnWaitsLeaveDeviceFaultsToTheUser) {
  PoolOptions o;
  o.max_bytes = 2 << 20;
  o.thread_cache_bytes = 0;
  auto pool = make_fake_pool(src, o);
  void* a = pool->allocate(2 << 20, s1.ref());
  s1.submit();
  s1.fail_next_wait();  // the job will have failed
  pool->deallocate(a, s1.ref());
  void* b = pool->allocate(2 << 20, {});  // waits (out of room) for s1's job
  EXPECT_EQ(b, a);
  EXPECT_EQ(s1.waits(), 1u);
  s1.submit();
  pool->deallocate(b, s1.ref());
  EXPECT_NO_THROW(pool->synchronize());
  EXPECT_EQ(s1.waits(), 2u);
  EXPECT_THROW(s1.user_wait(s1.submitted()), DeviceFault) << "still there for the user";
}

// describe() (pointer attributes, and the copies that record a block's use) finds the block
// holding any byte through the slot table's start bitmap; checked against the blocks' own
// ranges after random allocations and frees (splits and merges set and clear the bits), in
// small and large segments, and in a reserve() segment shared by large blocks. Seed printed.
TEST_F(PoolCoreTest, DescribeFindsTheBlockHoldingAnyByte) {
  PoolOptions o;
  o.thread_cache_bytes = 0;  // every free goes back to the arena: merges happen
  auto pool = make_fake_pool(src, o);
  pool->reserve(8 << 20, 0);
  const unsigned seed = 20261207;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Held {
    std::uintptr_t base;
    std::size_t size;
  };
  std::vector<Held> held, freed;
  auto check = [&](std::uintptr_t p, bool allocated, std::uintptr_t want) {
    std::uintptr_t base = 0;
    std::size_t requested = 0;
    const bool found = pool->describe(reinterpret_cast<void*>(p), base, requested);
    ASSERT_EQ(found, allocated) << std::hex << p;
    if (allocated) {
      ASSERT_EQ(base, want) << std::hex << p;
    }
  };
  for (int round = 0; round < 400; ++round) {
    if (held.empty() || rng() % 3 != 0) {
      const std::size_t sizes[] = {64, 100, 4096, 70000, 1 << 20, (2 << 20) + 64, 3 << 20};
      const std::size_t n = sizes[rng() % std::size(sizes)] + rng() % 512;
      held.push_back({reinterpret_cast<std::uintptr_t>(pool->allocate(n, {})), n});
    } else {
      const std::size_t i = rng() % held.size();
      pool->deallocate(reinterpret_cast<void*>(held[i].base), {});
      freed.push_back(held[i]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (const Held& h : held) {
      check(h.base, true, h.base);
      check(h.base + h.size - 1, true, h.base);
      check(h.base + rng() % h.size, true, h.base);
    }
  }
  for (const Held& f : freed) {
    const std::uintptr_t p = f.base + rng() % f.size;
    const bool reused = std::any_of(held.begin(), held.end(),
                                    [&](const Held& h) { return p - h.base < (h.size + 63) / 64 * 64; });
    if (!reused) check(p, false, 0);
  }
  for (const Held& h : held) pool->deallocate(reinterpret_cast<void*>(h.base), {});
}

// A thread alternating between more pools than its recent-pool slots: every block comes from
// and goes back to its own pool's cache (a slot swapped with the wrong cache would hand out
// one pool's memory from another), and each pool's counts add up.
TEST_F(PoolCoreTest, AThreadAlternatingBetweenPoolsUsesEachPoolsOwnCache) {
  std::vector<std::shared_ptr<detail::pool::PoolCore>> pools;
  for (int i = 0; i < 5; ++i) pools.push_back(make_fake_pool(src));
  const unsigned seed = 7;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<std::pair<std::size_t, void*>> held;
  for (int i = 0; i < 4000; ++i) {
    const std::size_t k = rng() % 3 == 0 ? rng() % pools.size() : static_cast<std::size_t>(i) % 2;
    if (held.size() < 8 || rng() % 2 == 0) {
      void* p = pools[k]->allocate(64 + 64 * (rng() % 4), {});
      for (std::size_t j = 0; j < pools.size(); ++j)
        ASSERT_EQ(pools[j]->owns(p), j == k) << "pool " << k << " handed out memory of pool " << j;
      held.emplace_back(k, p);
    } else {
      const std::size_t at = rng() % held.size();
      pools[held[at].first]->deallocate(held[at].second, {});
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }
  for (auto& [k, p] : held) pools[k]->deallocate(p, {});
  for (auto& pool : pools) {
    const PoolStats st = pool->stats();
    EXPECT_EQ(st.allocated_bytes, 0u);
    EXPECT_EQ(st.allocations, st.deallocations);
  }
}

TEST_F(PoolCoreTest, ThreadCacheIsReturnedWhenTheThreadExits) {
  auto pool = make_fake_pool(src);
  std::thread t([&] {
    void* p = pool->allocate(512, {});
    pool->deallocate(p, {});
    EXPECT_EQ(pool->stats().cached_bytes, 512u);
  });
  t.join();
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.cached_bytes, 0u);
  EXPECT_EQ(st.allocations, 1u);
  EXPECT_EQ(st.free_bytes, st.reserved_bytes);
  EXPECT_EQ(pool->trim(0), std::size_t{2} << 20);
}

}  // namespace
}  // namespace hostrt::test
