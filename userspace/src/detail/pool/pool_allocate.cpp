// PoolCore: allocation, warm and slow, and the growth policy.
#include "detail/pool/pool_core_internal.hpp"
// (first: it sets the warm paths' code generation)

#include <algorithm>
#include <cerrno>
#include <exception>
#include <string>
#include <utility>

#include "detail/fork_guard.hpp"
#include "detail/trace.hpp"

namespace hostrt::detail::pool {

// ---- allocate ----------------------------------------------------------------------------

// The warm path: a TLS load, a bin pop (indexed up to 16 KiB, hashed up to 1 MiB) and a few
// owner-only counter stores. No lock, no atomic read-modify-write, no syscall. Everything
// else (a thread new to this pool, a pending flush request, a size above 1 MiB, an empty
// bin) is allocate_slow's. The hashed bins have a warm path of their own, not only the slow
// path: its checks and calls tripled the cost of a 64 KiB pair (53 -> 22 ns); it is tail
// called, so that its registers are not saved on the indexed sizes' path.
void* PoolCore::allocate(std::size_t bytes, StreamRef home) {
  if (tl_fast.pool_id == id_) [[likely]] {
    ThreadCache& tc = *tl_fast.cache;
    if (tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed)) [[likely]] {
      if (bytes - 1 < ThreadCache::kDirectLimit) [[likely]] {
        const ThreadCache::Taken t = tc.pop_direct(round_up(bytes, kAlignment));
        if (t.block != nullptr) [[likely]] {
          hand_out(tc, t.block, bytes, home);
          return reinterpret_cast<void*>(t.addr);
        }
      } else if (bytes - 1 < kSmallLimit) {
        return allocate_hashed(tc, bytes, home);
      }
    }
  }
  return allocate_slow(bytes, home);
}

[[gnu::noinline]] void* PoolCore::allocate_hashed(ThreadCache& tc, std::size_t bytes, StreamRef home) {
  const ThreadCache::Taken t = tc.pop_hashed(round_up(bytes, kAlignment));
  if (t.block == nullptr) return allocate_slow(bytes, home);
  hand_out(tc, t.block, bytes, home);
  return reinterpret_cast<void*>(t.addr);
}

[[gnu::noinline]] void* PoolCore::allocate_slow(std::size_t bytes, StreamRef home) {
  if (tl_fast.pool_id != id_ && promote_recent(id_)) return allocate(bytes, home);
  check_process("allocate");
  if (closed()) throw_closed("allocate", owner_destroyed_.load(std::memory_order_relaxed));
  if (bytes > kMaxRequest)
    throw InvalidArgument(EINVAL, "pool: allocate of " + std::to_string(bytes) + " bytes");
  const std::size_t rounded = block_size_for(bytes);
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  if (tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed)) {
    const ThreadCache::Taken t = tc.pop(rounded);
    if (t.block != nullptr) {
      hand_out(tc, t.block, bytes, home);
      trace::emit(trace::Kind::PoolAlloc, t.addr, t.block->size, t.block->home_id,
                  static_cast<std::uint64_t>(trace::Source::ThreadCache));
      return reinterpret_cast<void*>(t.addr);
    }
    // One of this thread's own stream-ordered frees whose work has ended.
    if (Block* b = take_deferred(tc, rounded)) {
      hand_out(tc, b, bytes, home);
      ThreadCounters::bump(tc.counters.held, b->size);
      trace::emit(trace::Kind::PoolAlloc, b->addr, b->size, b->home_id,
                  static_cast<std::uint64_t>(trace::Source::ThreadCache));
      return b->ptr();
    }
  }
  return allocate_from_arena(tc, bytes, rounded, home);
}

[[gnu::always_inline]] inline void PoolCore::hand_out(ThreadCache& tc, Block* b, std::size_t bytes,
                                                      StreamRef home) noexcept {
  b->requested = bytes;
  // Member by member: the stream arrives in two registers, and a whole-struct copy makes GCC
  // spill them and reload one 16-byte vector, a store-forwarding stall that cost more than
  // the rest of the warm path together.
  b->home_id = home ? home.key() : 0;
  b->home_ops = home.ops;
  b->set_state(BlockState::Allocated);
  ThreadCounters& c = tc.counters;
  ThreadCounters::bump(c.requested, bytes);
  ThreadCounters::bump(c.allocations, 1);
}

void* PoolCore::allocate_from_arena(ThreadCache& tc, std::size_t bytes, std::size_t rounded, StreamRef home) {
  const SizeClass cls = size_class_of(rounded);
  bool source_refused = false;
  bool grew = false;
  bool adopted = false;  // once per call: other threads may keep deferring new frees
  for (;;) {
    SegmentList doomed;  // destroyed after the lock is released (declared before it)
    StreamKeeps released;
    std::unique_lock lk(mu_);
    if (tc.epoch_seen != flush_epoch_.load(std::memory_order_relaxed)) drain_locked(tc);
    settle_deferred_locked(tc, true, released);  // ended ones may coalesce into what is needed
    reclaim_locked(released);
    Block* b = arena_.fit(rounded);
    if (b == nullptr && tc.bytes() > 0) {
      // This thread's idle blocks may coalesce into what is needed: cheaper than the driver.
      drain_locked(tc);
      b = arena_.fit(rounded);
    }
    if (b == nullptr) {
      // Free space in the other class's segments beats growing: it is reserved already. The
      // classes stay apart as long as either has room, which is what keeps small blocks from
      // scattering over large segments in the steady state.
      b = arena_.fit_in(rounded, cls == SizeClass::Small ? SizeClass::Large : SizeClass::Small);
    }
    if (b == nullptr && arena_.has_idle()) {
      // About to grow, and idle segments could not serve this request. They stay cached only
      // while the growth keeps the pool under its high-water mark; above it they go back to
      // the driver first (after the lock), so that a pool whose sizes drift does not climb.
      const std::size_t need =
          arena_.next_segment(rounded, options_.min_segment_bytes, options_.shared_large_segments).bytes;
      doomed = arena_.take_idle_down_to(peak_reserved_ - std::min(peak_reserved_, need));
      segments_released_ += doomed.size();
    }
    if (b != nullptr) {
      hand_out(tc, b, bytes, home);
      ThreadCounters::bump(tc.counters.held, b->size);
      carve_ahead_locked(tc, b);
      if (grew) ++grown_allocations_;
      sample_peaks_locked();
      trace::emit(trace::Kind::PoolAlloc, b->addr, b->size, b->home_id,
                  static_cast<std::uint64_t>(grew ? trace::Source::NewSegment : trace::Source::Arena));
      return b->ptr();
    }

    // Grow, unless the limit or an earlier refusal says no.
    const Arena::Growth growth =
        arena_.next_segment(rounded, options_.min_segment_bytes, options_.shared_large_segments);
    std::size_t seg = growth.bytes;
    const std::size_t exact = round_up(rounded, kPageSize);
    // Segments other threads are allocating right now count as reserved already: max_bytes
    // is a hard limit, not one that each of two racing growths passes on its own.
    const std::size_t room = options_.max_bytes - std::min(options_.max_bytes, arena_.reserved() + growing_);
    if (seg > room && exact <= room) seg = exact;
    if (!source_refused && seg <= room) {
      growing_ += seg;
      lk.unlock();
      doomed.clear();  // give back before taking more
      try {
        grow(seg, cls, growth.dedicated);
        grew = true;
        continue;
      } catch (const OutOfMemory&) {
        source_refused = true;  // fall through to freeing memory up, then retry once
      }
      lk.lock();
    }

    // No room: give back idle segments (they cannot serve this request, or fit() would have
    // found them), then wait for the oldest pending work; fail only when neither is possible.
    if (arena_.has_idle()) {
      doomed = arena_.take_idle(0);
      segments_released_ += doomed.size();
      source_refused = false;
      continue;
    }
    // Every thread's deferred frees become the shared queues' (some may have ended already).
    if (!adopted) {
      adopted = true;
      if (adopt_deferred_locked() > 0) {
        reclaim_locked(released);
        continue;
      }
    }
    if (auto oldest = pending_.oldest()) {
      ++waits_;
      lk.unlock();
      // A device fault stays for the user's synchronize; only a wait that cannot happen at
      // all (a lost device) throws, and then waiting again would not help either.
      oldest->at.stream.wait_quiet(oldest->at.point);
      source_refused = false;
      continue;
    }
    // Other threads may be sitting on idle blocks: ask them to flush for the next caller.
    flush_epoch_.fetch_add(1, std::memory_order_relaxed);
    lk.unlock();
    throw_out_of_memory(bytes, source_refused ? "the driver refused a new segment" : "max_bytes reached");
  }
}

// A thread that takes blocks of one small size from the arena twice in a row (a working set
// growing, as the pending path's does until its first jobs end) gets the next few blocks of
// that size after b parked in its cache, so that its blocks lie together. Taken one at a
// time, two threads' blocks alternated in one segment: the pending path's 1 -> 2 thread
// scaling was 1.3-1.7 where a pool per thread gave 1.8-2.0 in the same turns (pool_bench
// pool_pending_path_scaling_unshared). Only from the free space right after b, so the pool
// never grows for it; a thread that stops using the size gives them back at its next flush.
// Not under a byte limit: there every free byte stays for whoever asks next (blocks idle in
// one thread's cache would fail another thread's allocation that fits today).
void PoolCore::carve_ahead_locked(ThreadCache& tc, const Block* b) noexcept {
  const std::size_t size = b->size;
  if (!tc.arena_again(size) || size > kCarveLimit || options_.max_bytes != kNoLimit ||
      tc.epoch_seen != flush_epoch_.load(std::memory_order_relaxed))
    return;
  const Block* last = b;
  for (std::size_t i = 0; i < kCarveAhead && tc.can_push(size); ++i) {
    Block* x = nullptr;
    try {
      x = arena_.fit_after(last, size);
    } catch (const std::bad_alloc&) {
    }
    if (x == nullptr) return;
    x->set_state(BlockState::Cached);  // home_id: set by hand_out, as for any cached block
    const bool parked = tc.push(x, x->addr, size);
    (void)parked;  // can_push said it fits
    ThreadCounters::bump(tc.counters.held, size);
    last = x;
  }
}

// The caller has added `bytes` to growing_ under the lock; this takes it off again, whether
// the segment arrives or not.
void PoolCore::grow(std::size_t bytes, SizeClass cls, bool dedicated) {
  std::unique_ptr<Segment> seg;
  try {
    // Both the driver call and the slot table's mmap happen here, with no lock held.
    seg = make_segment(source_->allocate(bytes), cls, dedicated);
    seg->owner = this;
    if (seg->size < (dedicated ? bytes : std::min(bytes, kSmallLimit)) ||
        !PageMap::representable(seg->base, seg->size))
      throw OutOfMemory(ENOMEM, "pool: segment source returned unusable memory");
    // A source that hands out more than asked could leave a dedicated segment too big for the
    // very request it was made for (the fit would refuse it, and the pool grow forever): such
    // a segment is shared instead.
    if (dedicated && seg->size - bytes > bytes / (2 * kDedicatedSlackDivisor)) seg->dedicated = false;
  } catch (...) {
    std::lock_guard lk(mu_);
    growing_ -= bytes;
    throw;
  }
  std::lock_guard lk(mu_);
  growing_ -= bytes;
  span_lo_.store(std::min(span_lo_.load(std::memory_order_relaxed), seg->base), std::memory_order_release);
  span_hi_.store(std::max(span_hi_.load(std::memory_order_relaxed), seg->base + seg->size),
                 std::memory_order_release);
  arena_.add_segment(std::move(seg));
  ++misses_;
  peak_reserved_ = std::max(peak_reserved_, arena_.reserved());
}

}  // namespace hostrt::detail::pool
