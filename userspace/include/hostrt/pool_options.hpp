// PoolOptions and PoolStats: how a hostrt::Pool is configured and what it reports, and
// PoolOutOfMemory. The pool's contract is in hostrt/pool.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "hostrt/error.hpp"

namespace hostrt {

struct PoolOptions {
  // Upper bound on reserved (pinned) bytes.
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
  // Reserved bytes the pool retains: whenever a segment becomes idle and more than this is
  // reserved, idle segments go back to the driver until no more than this is (or none is
  // idle). Not CUDA's release threshold, whose default is 0 and which applies at
  // synchronization points: a pinned segment costs a pin and a map to get back.
  std::size_t retain_bytes = std::numeric_limits<std::size_t>::max();
  // Per-thread cache budget for blocks of up to 1 MiB; 0 disables the caches. Cached blocks
  // cannot coalesce, so a large budget costs memory (4 MiB reserved 1.195x the peak on the
  // small-block trace of pool_bench, 1 MiB 1.124x, before the fragmentation step) and buys
  // no speed.
  std::size_t thread_cache_bytes = std::size_t{1} << 20;
  // Smallest geometric step for blocks of up to 1 MiB; a fragmented miss grows by a
  // sixteenth of it. Larger blocks get segments of their own size.
  std::size_t min_segment_bytes = std::size_t{2} << 20;
  // Large blocks (over 1 MiB) share geometrically sized segments, split by best fit, instead
  // of each getting a segment of its own: fewer driver calls when large sizes drift, more
  // memory (pool_bench traces, driver calls and reserved / peak requested: growing 1408 and
  // 1.10x against 4457 and 1.03x; random 119 and 1.19x against 1360 and 1.07x).
  // reserve() segments are shared either way.
  bool shared_large_segments = false;
  // Debug: deallocate waits for the block's device work (see the class comment).
  bool sync_on_free = false;
};

// A snapshot; exact when no other thread is using the pool at the time of the call.
struct PoolStats {
  std::size_t reserved_bytes = 0;  // held from the driver, in segments
  std::size_t peak_reserved_bytes = 0;
  std::size_t allocated_bytes = 0;  // held by users, rounded sizes
  std::size_t requested_bytes = 0;  // held by users, as requested
  // High-water marks of the two above, updated by every allocation that takes the pool's lock
  // (a thread-cache miss): exact with thread_cache_bytes = 0, a lower bound of the true peak
  // otherwise.
  std::size_t peak_allocated_bytes = 0;
  std::size_t peak_requested_bytes = 0;
  std::size_t pending_free_bytes = 0;  // freed, waiting for device work
  std::size_t cached_bytes = 0;        // free, parked in per-thread caches
  std::size_t free_bytes = 0;          // free in the pool's segments
  std::size_t segments = 0;
  std::size_t small_segments = 0;
  std::size_t large_segments = 0;
  std::uint64_t allocations = 0;
  std::uint64_t deallocations = 0;
  std::uint64_t hits = 0;               // allocations served without a driver call
  std::uint64_t misses = 0;             // segments allocated from the driver
  std::uint64_t frees_waited = 0;       // frees whose block had to wait for device work
  std::uint64_t waits = 0;              // times the pool blocked on a stream
  std::uint64_t segments_released = 0;  // segments returned to the driver

  std::string to_string() const;
};

class PoolOutOfMemory : public OutOfMemory {
 public:
  PoolOutOfMemory(const std::string& message, const PoolStats& stats)
      : OutOfMemory(12 /* ENOMEM */, message), stats_(stats) {}
  const PoolStats& stats() const noexcept { return stats_; }

 private:
  PoolStats stats_;
};

}  // namespace hostrt
