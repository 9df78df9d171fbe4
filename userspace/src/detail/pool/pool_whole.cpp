// PoolCore: what runs under the arena lock for every slow path, whole-pool operations and statistics.
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

// ---- under the arena lock ----------------------------------------------------------------

void PoolCore::reclaim_locked(StreamKeeps& released) noexcept {
  if (pending_.empty()) return;
  try {
    pending_.reclaim(
        [this](Block* b) {
          trace::emit(trace::Kind::PoolReusable, b->addr, b->size);
          arena_.free(b);
        },
        released);
  } catch (const std::bad_alloc&) {
    // Moving a block to its next stream's queue needed memory the host does not have: that
    // block stays out of the pool (a leak, not a crash), the rest are reclaimed next time.
  }
}

void PoolCore::release_above_retained_locked(SegmentList& doomed) noexcept {
  const std::size_t retain = retain_bytes_.load(std::memory_order_relaxed);
  if (arena_.reserved() <= retain) return;
  try {
    SegmentList idle = arena_.take_idle(retain);
    segments_released_ += idle.size();
    for (auto& s : idle) doomed.push_back(std::move(s));
  } catch (const std::bad_alloc&) {  // nothing was detached; try again at the next free
  }
}

void PoolCore::sample_peaks_locked() noexcept {
  std::int64_t allocated = 0, requested = 0;
  {
    std::lock_guard lk(registry_mu_);
    allocated = retired_.allocated;
    requested = retired_.requested;
    for (const auto& l : links_) {
      allocated += l->cache.counters.held.load(std::memory_order_relaxed) - l->cache.cached_bytes();
      requested += l->cache.counters.requested.load(std::memory_order_relaxed);
    }
  }
  peak_allocated_ = std::max(peak_allocated_, static_cast<std::size_t>(std::max<std::int64_t>(allocated, 0)));
  peak_requested_ = std::max(peak_requested_, static_cast<std::size_t>(std::max<std::int64_t>(requested, 0)));
}

// ---- whole-pool operations ---------------------------------------------------------------

void PoolCore::reserve(std::size_t large_bytes, std::size_t small_bytes) {
  check_process("reserve");
  if (closed()) throw_closed("reserve", owner_destroyed_.load(std::memory_order_relaxed));
  if (large_bytes > kMaxRequest || small_bytes > kMaxRequest)
    throw InvalidArgument(EINVAL, "pool: reserve of more than 2^46 bytes");
  auto one = [this](std::size_t bytes, SizeClass cls) {
    if (bytes == 0) return;
    const std::size_t seg =
        round_up(std::max(bytes, cls == SizeClass::Small ? kSmallLimit : bytes), kPageSize);
    bool over = false;
    {
      std::lock_guard lk(mu_);
      over = arena_.reserved() + growing_ + seg > options_.max_bytes;
      if (!over) growing_ += seg;
    }
    if (over) throw_out_of_memory(seg, "reserve would pass max_bytes");
    grow(seg, cls);
  };
  one(large_bytes, SizeClass::Large);
  one(small_bytes, SizeClass::Small);
}

std::size_t PoolCore::trim(std::size_t keep_bytes) {
  check_process("trim");
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  SegmentList doomed;
  StreamKeeps streams;
  std::size_t released = 0;
  {
    std::lock_guard lk(mu_);
    flush_epoch_.fetch_add(1, std::memory_order_relaxed);
    drain_locked(tc);
    adopt_deferred_locked();
    reclaim_locked(streams);
    doomed = arena_.take_idle(keep_bytes);
    segments_released_ += doomed.size();
    for (const auto& s : doomed) released += s->reserved;
  }
  trace::emit(trace::Kind::PoolTrim, released);
  return released;
}

void PoolCore::set_retain_bytes(std::size_t bytes) {
  retain_bytes_.store(bytes, std::memory_order_relaxed);
  SegmentList doomed;
  std::lock_guard lk(mu_);
  release_above_retained_locked(doomed);
}

void PoolCore::synchronize() {
  check_process("synchronize");
  const trace::ApiSpan span(trace::Api::PoolSynchronize);
  std::vector<HeldPoint> points;
  {
    std::lock_guard lk(mu_);
    adopt_deferred_locked();
    points = pending_.last_points();
    if (!points.empty()) ++waits_;
  }
  // Waiting on each stream's last pending point covers every earlier one of that stream. A
  // block that also waits on another stream moves to that stream's queue; loop until empty.
  while (!points.empty()) {
    // Throws only when it cannot wait (a lost device); looping on would never end.
    for (const HeldPoint& p : points) p.at.stream.wait_quiet(p.at.point);
    // Everything that may hold a stream's last reference is dropped after the lock.
    std::vector<HeldPoint> waited = std::move(points);
    points.clear();
    SegmentList doomed;
    StreamKeeps released;
    std::lock_guard lk(mu_);
    reclaim_locked(released);
    release_above_retained_locked(doomed);
    points = pending_.last_points();
  }
}

void PoolCore::reset_peak_stats() {
  std::lock_guard lk(mu_);
  peak_reserved_ = peak_allocated_ = peak_requested_ = 0;
  const PoolStats now = stats_locked();  // samples the current values into the peaks
  peak_reserved_ = now.reserved_bytes;
}

PoolStats PoolCore::stats() const {
  std::lock_guard lk(mu_);
  return stats_locked();
}

PoolStats PoolCore::stats_locked() const {
  PoolStats s;
  std::int64_t allocated = 0, requested = 0, cached = 0, deferred = 0;
  {
    std::lock_guard lk(registry_mu_);
    allocated = retired_.allocated;
    requested = retired_.requested;
    deferred = retired_.deferred;
    s.allocations = retired_.allocations;
    s.deallocations = retired_.deallocations;
    s.frees_waited = retired_.frees_deferred;
    for (const auto& l : links_) {
      const ThreadCounters& c = l->cache.counters;
      allocated += c.held.load(std::memory_order_relaxed) - l->cache.cached_bytes();
      requested += c.requested.load(std::memory_order_relaxed);
      cached += l->cache.cached_bytes();
      s.allocations += c.allocations.load(std::memory_order_relaxed);
      s.deallocations += c.deallocations.load(std::memory_order_relaxed);
      deferred += c.deferred.load(std::memory_order_relaxed);
      s.frees_waited += c.frees_deferred.load(std::memory_order_relaxed);
    }
  }
  s.allocated_bytes = static_cast<std::size_t>(std::max<std::int64_t>(allocated, 0));
  s.requested_bytes = static_cast<std::size_t>(std::max<std::int64_t>(requested, 0));
  s.cached_bytes = static_cast<std::size_t>(std::max<std::int64_t>(cached, 0));
  peak_allocated_ = std::max(peak_allocated_, s.allocated_bytes);
  peak_requested_ = std::max(peak_requested_, s.requested_bytes);
  s.reserved_bytes = arena_.reserved();
  s.peak_reserved_bytes = peak_reserved_;
  s.peak_allocated_bytes = peak_allocated_;
  s.peak_requested_bytes = peak_requested_;
  s.pending_free_bytes = pending_.bytes() + static_cast<std::size_t>(std::max<std::int64_t>(deferred, 0));
  s.free_bytes = arena_.free_bytes();
  s.small_segments = arena_.segments(SizeClass::Small);
  s.large_segments = arena_.segments(SizeClass::Large);
  s.segments = s.small_segments + s.large_segments;
  s.misses = misses_;
  // Counted as the complement so that the warm path need not count hits.
  s.hits = s.allocations >= grown_allocations_ ? s.allocations - grown_allocations_ : 0;
  s.frees_waited += frees_waited_;
  s.waits = waits_;
  s.segments_released = segments_released_;
  return s;
}

void PoolCore::throw_out_of_memory(std::size_t bytes, const char* why) const {
  PoolStats s = stats();
  throw PoolOutOfMemory(
      "pool: cannot allocate " + std::to_string(bytes) + " bytes: " + why + " (" + s.to_string() + ")", s);
}

}  // namespace hostrt::detail::pool
