// PoolCore: frees, warm and slow (waits, sync_on_free), record_stream and block lookups.
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

// ---- deallocate --------------------------------------------------------------------------

Block* PoolCore::find_allocated(const void* p) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const Segment* seg = segment_at(addr);
  if (seg == nullptr) throw_not_allocated(addr);
  return allocated_at(addr, seg->base, seg->size, seg->slots.view()).block;
}

// The free path's lookup: the thread's segment hint first, the page map otherwise.
[[gnu::always_inline]] inline SlotEntry PoolCore::find_allocated(const void* p, ThreadCache& tc) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const std::uint64_t epoch = arena_.detach_epoch();
  ThreadCache::SegmentHint& h = tc.hint;
  if (addr - h.base < h.size && h.epoch == epoch) [[likely]]
    return allocated_at(addr, h.base, h.size, h.slots);
  const Segment* seg = segment_at(addr);
  if (seg == nullptr) throw_not_allocated(addr);
  const SlotEntry e = allocated_at(addr, seg->base, seg->size, seg->slots.view());
  h = {seg->base, seg->size, seg->slots.view(), epoch};
  return e;
}

// Captures, for every stream the block may have been used on (the one it is freed on, its
// home stream, and each record_stream stream), what a free there must wait for: the last
// point submitted so far that the host has not yet seen completed, and the points that
// stream's next job would wait for (Stream::wait: the free is ordered after them too). Later
// work cannot involve the block: the caller gave it up. record_stream keeps `uses` free of
// duplicates and of the home stream, so only the stream freed on needs skipping.
// Called without a pool lock (collect may lock the stream).
void PoolCore::collect_waits(Block* b, StreamRef stream) const {
  if (b->side) {
    b->side->waits.clear();
    b->side->keeps.clear();
  }
#ifndef HOSTRT_POOL_UNSAFE_REUSE
  auto add = [b](StreamRef s) {
    if (s.unfinished() == 0) return false;
    BlockWaits& w = b->side_record();
    s.collect(w.waits, w.keeps);
    return true;
  };
  const std::uint64_t freed_on = stream ? stream.key() : 0;
  if (stream) add(stream);
  if (b->home_id != 0 && b->home_id != freed_on) {
    // The home stream may be destroyed by now: gone with all its work reached, or retired
    // with its last point still to come (its address may even hold another stream since).
    std::shared_ptr<const void> keep;
    const StreamRef home = b->home_ops->find(b->home_id, keep);
    if (home && add(home) && keep) b->side->keeps.push_back(std::move(keep));
  }
  if (b->recorded())
    for (const StreamRef& u : b->side->uses)
      if (u.key() != freed_on) add(u);
#else
  // Deliberately wrong, to prove the reuse-safety test can fail: ignores the device.
  (void)stream;
#endif
}

// The warm path: the stream's completion check (first, while little is live across the
// call), the thread's segment hint, one slot load, and a push onto a bin. Anything
// else (a stream with unfinished work, a home stream other than `stream`, record_stream
// uses, a pointer outside the hinted segment or not allocated) goes to deallocate_slow,
// which decides from scratch. sync_on_free needs no test here: a free that passes these
// has nothing to wait for.
void PoolCore::deallocate(void* p, StreamRef stream) {
#ifndef HOSTRT_POOL_UNSAFE_REUSE
  // Loads only, no call (a call made this function save and restore six registers): a stream
  // that does not publish its state, or may have work left, takes the slow path, which
  // decides from scratch.
  if (stream && !stream.stream->idle_published()) return deallocate_slow(p, stream);
#endif
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (tl_fast.pool_id == id_) [[likely]] {
    ThreadCache& tc = *tl_fast.cache;
    const ThreadCache::SegmentHint& h = tc.hint;
    const std::uintptr_t off = addr - h.base;
    if (off < h.size && off % kAlignment == 0 && h.epoch == arena_.detach_epoch()) [[likely]] {
      const SlotEntry e = SlotTable::load(h.slots, off / kAlignment);
      Block* b = e.block;
      const std::size_t size = e.units * kAlignment;
      // size is 0 when the slot table cannot hold it (4 MiB and up): never a cached size.
      if (b != nullptr && size - 1 < kSmallLimit && b->addr == addr &&
          b->load_state() == BlockState::Allocated &&
          (b->home_id == 0 || (stream && b->home_id == stream.key())) &&
          tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed)) [[likely]] {
        if (size > ThreadCache::kDirectLimit) return deallocate_hashed(b, p, size, stream);
        if (tc.push_direct(b, addr, size)) [[likely]] {
          park(tc, b);
          return;
        }
      }
    }
  }
  deallocate_slow(p, stream);
}

[[gnu::always_inline]] inline void PoolCore::park(ThreadCache& tc, Block* b) noexcept {
  ThreadCounters& c = tc.counters;
  ThreadCounters::bump(c.requested, -static_cast<std::int64_t>(b->requested));
  ThreadCounters::bump(c.deallocations, 1);
  // home_id is left as it is: nothing reads a cached block's, and hand_out sets it.
  b->set_state(BlockState::Cached);
}

[[gnu::noinline]] void PoolCore::deallocate_hashed(Block* b, void* p, std::size_t size, StreamRef stream) {
  ThreadCache& tc = *tl_fast.cache;
  if (tc.push_hashed(b, reinterpret_cast<std::uintptr_t>(p), size)) {
    park(tc, b);
    return;
  }
  deallocate_slow(p, stream);
}

[[gnu::noinline]] void PoolCore::deallocate_slow(void* p, StreamRef stream) {
  if (tl_fast.pool_id != id_ && promote_recent(id_)) return deallocate(p, stream);
  check_process("deallocate");
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  Block* b = find_allocated(p, tc).block;
  const std::size_t size = b->size;
  collect_waits(b, stream);
  if (trace::enabled()) [[unlikely]] {
    const std::size_t n = b->side ? b->side->waits.size() : 0;
    trace::emit(trace::Kind::PoolFree, b->addr, size, stream ? stream.key() : 0, n);
    for (std::size_t i = 0; i < n; ++i) {
      const StreamPoint& w = b->side->waits[i];
      trace::emit(trace::Kind::PoolFreeWait, b->addr, w.stream.key(), w.point);
    }
  }

  if (options_.sync_on_free && b->waiting()) {
    // Debug mode: the free returns once the block's work has ended, so a missing
    // record_stream shows as corruption right here. A failed job stays for the stream's own
    // synchronize to report (a free that threw after freeing would invite a retry that frees
    // another owner's block); a wait that could not happen (a lost device) is no completion:
    // those points stay, and the block waits in the pending queues for them.
    {
      std::lock_guard lk(mu_);
      ++waits_;
    }
    BlockWaits& bw = *b->side;
    for (const StreamPoint& w : bw.waits) {
      try {
        w.stream.wait_quiet(w.point);
      } catch (const Error&) {
      }
    }
    std::erase_if(bw.waits, [](const StreamPoint& w) { return w.stream.reached(w.point); });
    if (bw.waits.empty()) bw.keeps.clear();
  }

  // Everything up to here may throw (a foreign pointer, std::bad_alloc in collect_waits) and
  // has changed nothing the pool or the caller can see: the block is still allocated. From
  // here on only pending_.add can fail, and it fails before anything is committed.
  // Dropped when this function returns, after any pool lock (a last reference destroys the
  // stream, which calls the driver).
  std::vector<std::shared_ptr<const void>> use_keeps;
  const std::int64_t requested = static_cast<std::int64_t>(b->requested);
  auto commit = [&] {  // noexcept: clears the block's uses before another thread can see it
    // By the uses, not the state: the queueing of a pending free may have set it already
    // (each caller sets the block's next state itself).
    if (b->side && !b->side->uses.empty()) {
      b->side->uses.clear();
      use_keeps = std::move(b->side->use_keeps);
      b->side->use_keeps.clear();
    }
    b->home_id = 0;
  };

  // Nothing left to wait for, so the block is reusable now: park it in this thread's cache
  // (no lock) if it has room.
  ThreadCounters& c = tc.counters;
  if (!b->waiting() && tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed) && tc.can_push(size)) {
    commit();
    const bool parked = tc.push(b, reinterpret_cast<std::uintptr_t>(p), size);
    (void)parked;  // can_push said it fits
    b->set_state(BlockState::Cached);
    ThreadCounters::bump(c.requested, -requested);
    ThreadCounters::bump(c.deallocations, 1);
    return;
  }
  // No room in the cache: blocks of other sizes may give theirs, under the arena lock the
  // free would take anyway, when this size keeps coming back without room (a thread freeing
  // and allocating one large size again, a 1 MiB staging buffer beside a few small blocks,
  // or a phase of small blocks after a large one): ThreadCache::unparked_again says when.
  if (!b->waiting() && tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed)) {
    if (tc.unparked_again(size) && tc.can_evict_for(size)) {
      const bool parked = park_evicting(tc, b, commit);
      ThreadCounters::bump(c.requested, -requested);
      ThreadCounters::bump(c.deallocations, 1);
      if (!parked) ThreadCounters::bump(c.held, -static_cast<std::int64_t>(size));
      return;
    }
  }
  // Work still uses it: the thread keeps the free (no lock shared with other threads) when
  // its list has room; the pool's shared queues take it otherwise.
  if (!b->waiting() || tc.epoch_seen != flush_epoch_.load(std::memory_order_relaxed) ||
      !defer_free(tc, b, commit))
    free_locked_path(tc, b, commit);  // throws std::bad_alloc with the block still allocated
  ThreadCounters::bump(c.requested, -requested);
  ThreadCounters::bump(c.deallocations, 1);
  ThreadCounters::bump(c.held, -static_cast<std::int64_t>(size));
}

template <typename Commit>
bool PoolCore::defer_free(ThreadCache& tc, Block* b, Commit& commit) {
  const std::size_t size = b->size;
  if (size > kSmallLimit || size > tc.capacity()) return false;  // a cache of no capacity too
  BlockWaits& w = *b->side;
  const std::size_t kept = w.keeps.size();
  try {
    retain_waits(w);
  } catch (const std::bad_alloc&) {
    w.keeps.resize(kept);
    return false;
  }
  DeferredFrees& d = tc.deferred;
  std::unique_lock lk(d.m);
  if (d.full() || d.bytes() + size > tc.capacity()) {
    // Full: everything listed goes to the shared queues in one arena lock (lock order: the
    // arena lock before the list's), and this free starts the list again.
    lk.unlock();
    {
      StreamKeeps released;  // dropped after the lock
      std::lock_guard arena(mu_);
      settle_deferred_locked(tc, false, released);
      reclaim_locked(released);
    }
    lk.lock();
    if (d.full() || d.bytes() + size > tc.capacity()) {  // the shared queues could not take them
      w.keeps.resize(kept);
      return false;
    }
  }
  commit();
  b->set_state(BlockState::Pending);
  d.push(b);
  ThreadCounters::bump(tc.counters.deferred, size);
  ThreadCounters::bump(tc.counters.frees_deferred, 1);
  return true;
}

template <typename Commit>
bool PoolCore::park_evicting(ThreadCache& tc, Block* b, Commit& commit) {
  SegmentList doomed;  // destroyed after the lock
  std::lock_guard lk(mu_);
  if (tc.epoch_seen != flush_epoch_.load(std::memory_order_relaxed)) {
    // trim() asked for every cache since the check: the block and the cache go back.
    commit();
    arena_.free(b);
    drain_locked(tc);
    release_above_retained_locked(doomed);
    return false;
  }
  std::int64_t evicted = 0;
  tc.evict_for(b->size, [&](Block* x) {
    evicted += static_cast<std::int64_t>(x->size);  // arena_.free may merge x away
    arena_.free(x);
  });
  ThreadCounters::bump(tc.counters.held, -evicted);
  commit();
  const bool parked = tc.push(b, b->addr, b->size);
  (void)parked;  // can_evict_for said it would fit
  b->set_state(BlockState::Cached);
  release_above_retained_locked(doomed);
  return true;
}

template <typename Commit>
void PoolCore::free_locked_path(ThreadCache& tc, Block* b, Commit& commit) {
  SegmentList doomed;
  StreamKeeps released;
  std::lock_guard lk(mu_);
  if (!b->waiting()) {
    commit();
    arena_.free(b);
  } else {
    pending_.add(b);  // strong guarantee: on std::bad_alloc the block is not queued
    commit();         // before reclaim, which may hand the block to the arena
    ++frees_waited_;
  }
  // trim() asked every thread to return its cache; a thread that only frees gets here (its
  // warm free sees the new epoch) and obeys now, not at an allocation that may never come.
  if (tc.epoch_seen != flush_epoch_.load(std::memory_order_relaxed)) drain_locked(tc);
  reclaim_locked(released);
  release_above_retained_locked(doomed);
  // No peak sampling here: a free lowers what is allocated, and the scan of every thread's
  // counters under the arena lock made each pending free slower the more threads there were.
}

void PoolCore::record_stream(void* p, StreamRef stream) {
  check_process("record_stream");
  if (!stream) throw InvalidArgument(EINVAL, "pool: record_stream with an empty stream");
  Block* b = find_allocated(p);
  auto keep = stream.retain();  // the user may destroy the stream before the free
  // Several threads may record uses of one block at once (PyTorch's record_stream on a shared
  // tensor): the arena lock orders them. A free racing a record is the caller's to order.
  std::lock_guard lk(mu_);
  if (b->home_id == stream.key()) return;
  BlockWaits& w = b->side_record();
  for (const StreamRef& u : w.uses)
    if (u.key() == stream.key()) return;
  w.uses.push_back(stream);
  try {
    if (keep) w.use_keeps.push_back(std::move(keep));
  } catch (...) {
    w.uses.pop_back();
    throw;
  }
  b->set_state(BlockState::Recorded);
}

bool PoolCore::record_use(const void* p, StreamRef stream) {
  std::uintptr_t base = 0;
  std::size_t requested = 0;
  if (!describe(p, base, requested)) return false;
  try {
    record_stream(reinterpret_cast<void*>(base), stream);
  } catch (const InvalidArgument&) {  // freed between the two looks: not ours to record
    return false;
  }
  return true;
}

std::size_t PoolCore::block_size(const void* p) const { return find_allocated(p)->size; }

bool PoolCore::describe(const void* p, std::uintptr_t& base, std::size_t& requested) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lk(mu_);  // no block splits or merges meanwhile
  const Segment* seg = segment_at(addr);
  if (seg == nullptr || addr - seg->base >= seg->size) return false;
  // Only a block's first slot names it: the nearest named slot at or before p is its block.
  const std::size_t i = seg->slots.start_at_or_before((addr - seg->base) / kAlignment);
  if (i == SlotTable::kNone) return false;
  const Block* b = SlotTable::load(seg->slots.view(), i).block;
  if (b == nullptr || addr - b->addr >= b->size || !b->allocated()) return false;
  base = b->addr;
  requested = b->requested;
  return true;
}

}  // namespace hostrt::detail::pool
