// The public pool on a real runtime device (Emulated on the host, Drm in the VM): memory is
// pinned and usable for copies, handles free stream-ordered, containers live in it, and the
// registration cache saves registrations.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <memory_resource>
#include <numeric>
#include <vector>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.hpp"
#include "hostrt/pool.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class PoolApiTest : public DeviceStreamTest {};

TEST_P(PoolApiTest, BlocksArePinnedAndCarryCopies) {
  Pool pool(*device);
  const std::size_t n = 3000;
  void* src = pool.allocate(n, stream);
  void* dst = pool.allocate(n, stream);
  const PointerAttributes a = pointer_attributes(src);
  EXPECT_EQ(a.type, MemoryType::Pinned) << "segments come from host_alloc";
  fill(src, n, 7);
  stream.memcpy_async(DevicePtr(0), src, n);
  stream.memcpy_async(dst, DevicePtr(0), n);
  stream.synchronize();
  EXPECT_EQ(first_diff(src, dst, n), -1);
  pool.deallocate(src, stream);
  pool.deallocate(dst, stream);
  const PoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.reserved_bytes, std::size_t{2} << 20);
  EXPECT_EQ(pool.trim(), std::size_t{2} << 20);
}

// pointer_attributes() of a pool block reads no segment without its pool's lock: it picks the
// pools whose address span holds the pointer and lets each look under its lock. Two pools
// growing in turn interleave their segments, so one pool's span covers the other's blocks:
// every block must still be described by its own pool.
TEST_P(PoolApiTest, PointerAttributesFindEachBlockWhenPoolsInterleave) {
  Pool a(*device), b(*device);
  // Over 1 MiB: a segment of its own each, a page-rounded one: the segment's size is not the
  // block's, so an answer that falls back to the segment shows.
  constexpr std::size_t kBlock = (3 << 20) + 3000;
  std::vector<std::pair<Pool*, char*>> blocks;
  for (int i = 0; i < 3; ++i)
    for (Pool* pool : {&a, &b}) blocks.emplace_back(pool, static_cast<char*>(pool->allocate(kBlock)));
  auto span = [&](Pool* pool) {
    std::uintptr_t lo = ~std::uintptr_t{0}, hi = 0;
    for (auto [owner, p] : blocks)
      if (owner == pool) {
        lo = std::min(lo, reinterpret_cast<std::uintptr_t>(p));
        hi = std::max(hi, reinterpret_cast<std::uintptr_t>(p) + kBlock);
      }
    return std::pair(lo, hi);
  };
  int inside_other = 0;
  for (auto [owner, p] : blocks) {
    const auto [lo, hi] = span(owner == &a ? &b : &a);
    if (reinterpret_cast<std::uintptr_t>(p) >= lo && reinterpret_cast<std::uintptr_t>(p) < hi) ++inside_other;
    const PointerAttributes at = pointer_attributes(p + 5000);
    EXPECT_EQ(at.type, MemoryType::Pinned);
    EXPECT_EQ(at.base, p) << "a block of " << (owner == &a ? "a" : "b");
    EXPECT_EQ(at.size, kBlock);
    EXPECT_EQ(at.offset, 5000u);
  }
  std::printf("blocks inside the other pool's span: %d of %zu\n", inside_other, blocks.size());
  EXPECT_GT(inside_other, 0) << "the segments did not interleave: the case is not exercised";
  for (auto [owner, p] : blocks) owner->deallocate(p);
}

// The free must wait for the copy. Emulated: the stream's queue is held, so the copy is
// certainly pending when the buffer goes (before, the test relied on the copy still running
// and caught an unsafe pool 17 times out of 30). Drm: a reuse must come after completion.
TEST_P(PoolApiTest, PoolBufferFreesOnItsStreamAfterTheCopy) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  Pool pool(*device, PoolOptions{.thread_cache_bytes = 0});
  void* first = nullptr;
  if (emu != nullptr) emu->hold_queue(hostrt::detail::Access::core(stream)->queue_id(), true);
  {
    PoolBuffer b = pool.allocate_buffer(4000, stream);
    first = b.data();
    fill(b.data(), b.size(), 3);
    stream.memcpy_async(DevicePtr(0), b.data(), b.size());
  }  // freed on `stream` while the copy is held (Emulated) or may still run
  PoolBuffer c = pool.allocate_buffer(4000, stream);
  if (emu != nullptr) {
    EXPECT_NE(c.data(), first) << "reused while the copy was held";
    EXPECT_EQ(pool.stats().pending_free_bytes, 4032u);
    emu->hold_queue(hostrt::detail::Access::core(stream)->queue_id(), false);
  } else if (c.data() == first) {
    EXPECT_TRUE(stream.reached(stream.last_submitted())) << "reused before completion";
  }
  stream.synchronize();
  pool.synchronize();
  EXPECT_EQ(pool.stats().pending_free_bytes, 0u);
}

// PoolBuffer and PoolMemoryResource hold the stream's internals: the Stream handle may move
// (before: the buffer freed through the moved-from handle, which threw inside reset(), and the
// block leaked; the resource's deallocate threw) or go first (before: a dangling Stream*).
TEST_P(PoolApiTest, PoolBufferAndResourceSurviveTheirStreamHandle) {
  Pool pool(*device);
  auto s = std::make_unique<Stream>(device->create_stream());
  PoolBuffer b = pool.allocate_buffer(1000, *s);
  PoolMemoryResource mr(pool, s.get());
  void* q = mr.allocate(500);
  Stream moved = std::move(*s);
  s.reset();
  b.reset();
  EXPECT_NO_THROW(mr.deallocate(q, 500));
  EXPECT_EQ(pool.stats().allocated_bytes, 0u) << "a block leaked";
  PoolBuffer c = pool.allocate_buffer(100, moved);
  { Stream gone = std::move(moved); }
  c.reset();
  EXPECT_EQ(pool.stats().allocated_bytes, 0u);
}

// record_stream keeps the recorded stream alive until the block's free: the user may destroy
// it right after recording (before: the free read the destroyed stream, ASan: use after free).
TEST_P(PoolApiTest, RecordStreamKeepsTheRecordedStreamAlive) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  if (emu == nullptr) GTEST_SKIP() << "needs the emulated engine's queue hold";
  Pool pool(*device, PoolOptions{.thread_cache_bytes = 0});
  void* p = pool.allocate(4000, stream);
  fill(p, 4000, 5);
  auto other = std::make_unique<Stream>(device->create_stream());
  const std::uint32_t q_other = hostrt::detail::Access::core(*other)->queue_id();
  emu->hold_queue(q_other, true);
  other->memcpy_async(DevicePtr(0), p, 4000);
  pool.record_stream(p, *other);
  other.reset();
  pool.deallocate(p, stream);
  EXPECT_EQ(pool.stats().pending_free_bytes, 4032u) << "the recorded stream's copy is held";
  void* q = pool.allocate(4000, stream);
  EXPECT_NE(q, p);
  emu->hold_queue(q_other, false);
  pool.synchronize();
  EXPECT_EQ(pool.stats().pending_free_bytes, 0u);
  pool.deallocate(q, stream);
}

// A copy naming a block on another stream records that stream's use, as PyTorch's copy_
// does: a free on the home stream without record_stream still waits for the copy (before:
// the block was handed out again while the copy was held, and the CPU's next write raced it).
TEST_P(PoolApiTest, ACopyOnAnotherStreamRecordsItsUseOfTheBlock) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  Pool pool(*device, PoolOptions{.thread_cache_bytes = 0});
  auto* p = static_cast<unsigned char*>(pool.allocate(8192, stream));
  fill(p, 8192, 41);
  Stream other = device->create_stream();
  if (emu != nullptr) {
    emu->hold_queue(hostrt::detail::Access::core(other)->queue_id(), true);
  } else {  // the copy waits behind a longer one
    PinnedBuffer a = device->host_alloc(64u << 10), b = device->host_alloc(64u << 10);
    other.memcpy_async(b.data(), a.data(), a.size(), CopyKind::H2H);
  }
  other.memcpy_async(DevicePtr(0), p + 4096, 4000);  // an interior pointer of the block
  pool.deallocate(p, stream);                        // no record_stream
  void* q = pool.allocate(8192, stream);
  if (emu != nullptr) {
    EXPECT_NE(q, p) << "reused while the other stream's copy was held";
    EXPECT_EQ(pool.stats().pending_free_bytes, 8192u);
    emu->hold_queue(hostrt::detail::Access::core(other)->queue_id(), false);
  } else if (q == p) {
    EXPECT_TRUE(other.reached(other.last_submitted())) << "reused before the other stream's copy ended";
  }
  other.synchronize();
  pool.deallocate(q, stream);
  pool.synchronize();
  EXPECT_EQ(pool.stats().pending_free_bytes, 0u);
}

TEST_P(PoolApiTest, PmrContainersLiveInPinnedMemory) {
  Pool pool(*device);
  PoolMemoryResource mr(pool, &stream);
  std::pmr::vector<int> v(&mr);
  for (int i = 0; i < 10000; ++i) v.push_back(i);
  EXPECT_EQ(pointer_attributes(v.data()).type, MemoryType::Pinned);
  EXPECT_EQ(pool.block_size(v.data()) % 64, 0u);
  EXPECT_EQ(std::accumulate(v.begin(), v.end(), 0LL), 49995000LL);
  EXPECT_THROW((void)mr.allocate(64, 128), InvalidArgument);
  PoolMemoryResource same(pool, &stream), other(pool);
  EXPECT_TRUE(mr.is_equal(same));
  EXPECT_FALSE(mr.is_equal(other));
}

TEST_P(PoolApiTest, RegistrationCacheRegistersARangeOnce) {
  std::vector<unsigned char> mem(1 << 16);
  RegistrationCache cache(*device);
  {
    RegisteredRange a = cache.acquire(mem.data(), mem.size());
    RegisteredRange b = cache.acquire(mem.data() + 4096, 8192);
    EXPECT_EQ(a.handle(), b.handle());
    EXPECT_EQ(pointer_attributes(mem.data() + 5000).type, MemoryType::Registered);
  }
  RegisteredRange c = cache.acquire(mem.data(), 100);
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.hits(), 2u);
  c.reset();
  EXPECT_EQ(cache.evict_idle(), 1u);
  EXPECT_EQ(pointer_attributes(mem.data()).type, MemoryType::Pageable);
}

// The pool refers to a stream's internals, not to the Stream handle: a handle may be moved
// while its blocks are held, and destroyed right after a free whose copy is still queued
// (the pending free keeps the internals alive). The emulated engine holds the queue, so the
// free really is pending; before, the pool kept &stream and read a dangling or emptied
// handle (ASan: use after free; a moved-from handle: reuse before completion).
TEST_P(PoolApiTest, StreamsMayMoveAndGoAwayAfterAFree) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  if (emu == nullptr) GTEST_SKIP() << "needs the emulated engine's queue hold";
  Pool pool(*device, PoolOptions{.thread_cache_bytes = 0});
  auto s = std::make_unique<Stream>(device->create_stream());
  void* p = pool.allocate(4000, *s);
  Stream moved = std::move(*s);  // the handle moves; its internals (and the pool's view) stay
  emu->hold_queue(hostrt::detail::Access::core(moved)->queue_id(), true);
  fill(p, 4000, 1);
  moved.memcpy_async(DevicePtr(0), p, 4000);
  pool.deallocate(p, moved);
  EXPECT_EQ(pool.stats().pending_free_bytes, 4032u) << "the copy is held: the free waits";
  const std::uint32_t queue = hostrt::detail::Access::core(moved)->queue_id();
  { Stream gone = std::move(moved); }  // the last handle goes while the free is pending
  s.reset();
  void* q = pool.allocate(4000, stream);
  EXPECT_NE(q, p) << "reused while the device may still read it";
  emu->hold_queue(queue, false);
  pool.synchronize();  // waits on the destroyed handle's internals
  EXPECT_EQ(pool.stats().pending_free_bytes, 0u);
  pool.deallocate(q, stream);
}

// A block used on two streams waits in one stream's queue at a time (the recorded stream's
// first, here) and then moves to the next: every stream it waits on must stay alive until it
// is reusable, even when both handles go right after the free. Before, only the queue it sat
// in kept its stream; the move then read the destroyed home stream (ASan: use after free).
TEST_P(PoolApiTest, EveryStreamAFreeWaitsOnStaysAlive) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  if (emu == nullptr) GTEST_SKIP() << "needs the emulated engine's queue hold";
  Pool pool(*device, PoolOptions{.thread_cache_bytes = 0});
  auto home = std::make_unique<Stream>(device->create_stream());
  auto other = std::make_unique<Stream>(device->create_stream());
  const std::uint32_t home_q = hostrt::detail::Access::core(*home)->queue_id(),
                      other_q = hostrt::detail::Access::core(*other)->queue_id();
  void* p = pool.allocate(4000, *home);
  fill(p, 4000, 2);
  emu->hold_queue(home_q, true);
  emu->hold_queue(other_q, true);
  home->memcpy_async(DevicePtr(0), p, 4000);
  other->memcpy_async(DevicePtr(0), p, 4000);
  pool.record_stream(p, *other);
  pool.deallocate(p, *home);
  home.reset();
  other.reset();
  emu->hold_queue(other_q, false);
  emu->wait_until_stalled();
  void* q = pool.allocate(4000, stream);  // reclaims: the block moves to the home queue
  EXPECT_NE(q, p) << "reused while the home stream's copy was still held";
  EXPECT_EQ(pool.stats().pending_free_bytes, 4032u);
  emu->hold_queue(home_q, false);
  pool.synchronize();
  EXPECT_EQ(pool.stats().pending_free_bytes, 0u);
  pool.deallocate(q, stream);
}

// cudaStreamWaitEvent semantics for frees: s1 copies from the block, e is recorded on s1, the
// block's stream waits for e and frees the block without submitting anything since. The free
// is ordered after e, so the block must not be handed out before s1's copy ends. Emulated:
// s1's queue is held, so the copy really is pending; before, the free saw an idle stream and
// the block came straight back out of the thread cache. Drm (VM): no hold, so only a reuse
// that happens before s1's copy ended is an error.
TEST_P(PoolApiTest, AFreeAfterAStreamWaitEventWaitsForTheEventsWork) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  Pool pool(*device);
  Stream s1 = device->create_stream();
  void* p = pool.allocate(4000, stream);
  fill(p, 4000, 4);
  if (emu != nullptr) emu->hold_queue(hostrt::detail::Access::core(s1)->queue_id(), true);
  s1.memcpy_async(DevicePtr(0), p, 4000);
  Event e;
  e.record(s1);
  stream.wait(e);
  pool.deallocate(p, stream);
  void* q = pool.allocate(4000, stream);
  if (emu != nullptr) {
    EXPECT_NE(q, p) << "reused while s1's copy (which the free was ordered after) was held";
    EXPECT_EQ(pool.stats().pending_free_bytes, 4032u);
    emu->hold_queue(hostrt::detail::Access::core(s1)->queue_id(), false);
  } else if (q == p) {
    EXPECT_TRUE(s1.reached(e.point())) << "reused before s1's copy ended";
  }
  pool.synchronize();
  EXPECT_EQ(pool.stats().pending_free_bytes, 0u);
  pool.deallocate(q, stream);
  s1.synchronize();
}

// The range shares the cache's index: dropping the cache first must not leave it dangling
// (it did, before: ASan reported a use after free in RegisteredRange::reset).
// munmap + mmap at the same address: the cache's idle registration still pins the old pages,
// and a hit would have the device copy those. The driver counts the invalidation in the
// completion page; the next acquire sees it (one load) and registers the range again.
TEST_P(PoolApiTest, RegistrationCacheRegistersARemappedRangeAgain) {
  if (detail::emulated_backend(*device) != nullptr)
    GTEST_SKIP() << "the emulated backend cannot see the process's mappings change";
  const std::size_t n = 3 * 4096;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  fill(p, n, 1);
  RegistrationCache cache(*device);
  Stream s = device->create_stream();
  PinnedBuffer dst = device->host_alloc(n);
  cache.acquire(p, n).reset();  // registered, now idle in the cache
  ASSERT_EQ(munmap(p, n), 0);
  ASSERT_EQ(mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p);
  fill(p, n, 2);
  std::vector<unsigned char> want(n);
  fill(want.data(), n, 2);
  {
    RegisteredRange r = cache.acquire(p, n);
    EXPECT_EQ(cache.misses(), 2u) << "a stale registration was served from the cache";
    s.memcpy_async(dst.data(), p, n, CopyKind::H2H);
    s.synchronize();
  }
  EXPECT_EQ(first_diff(dst.data(), want.data(), n), -1) << "the device copied the old pages";
  cache.evict_idle();
  munmap(p, n);
}

TEST_P(PoolApiTest, RegisteredRangeMayOutliveItsCache) {
  std::vector<unsigned char> mem(1 << 14);
  RegisteredRange r;
  {
    RegistrationCache cache(*device);
    r = cache.acquire(mem.data(), mem.size());
  }
  EXPECT_EQ(pointer_attributes(mem.data()).type, MemoryType::Registered);
  r.reset();
  EXPECT_EQ(pointer_attributes(mem.data()).type, MemoryType::Pageable) << "the last reference unregisters";
}

TEST_P(PoolApiTest, EmptyStreamIsRejected) {
  Pool pool(*device);
  Stream empty;
  EXPECT_THROW(pool.allocate(64, empty), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolApiTest, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
