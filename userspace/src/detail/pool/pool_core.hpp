// PoolCore: the caching, stream-ordered pinned-memory pool behind hostrt::Pool. The contract
// is written once, on hostrt::Pool (include/hostrt/pool.hpp); this is how it is kept.
//
// Locks and what they guard (always taken in this order, never the other way round):
//  exit_mu_      the exit cache, used by threads whose thread_locals are destroyed;
//  mu_           the arena, the pending-free queues, peaks and growth (the "arena lock");
//  registry_mu_  the list of per-thread caches and the counters of exited threads;
//  a thread's DeferredFrees lock (ThreadCache::deferred.m): its waiting frees; its owner takes
//                it alone on its pending frees and allocation misses.
// None is held across a SegmentSource call, a segment's destruction (driver calls, munmap)
// or a blocking wait on a stream. The warm path takes none: see allocate()/deallocate().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "detail/pool/arena.hpp"
#include "detail/pool/page_map.hpp"
#include "detail/pool/pending.hpp"
#include "detail/pool/segment_source.hpp"
#include "detail/pool/stream_ref.hpp"
#include "detail/pool/thread_cache.hpp"
#include "hostrt/pool.hpp"

namespace hostrt::detail::pool {

struct CacheLink;

class PoolCore : public std::enable_shared_from_this<PoolCore> {
 public:
  // Private constructor by convention: use create(), thread caches hold weak references.
  static std::shared_ptr<PoolCore> create(std::unique_ptr<SegmentSource> source, const PoolOptions& options);
  PoolCore(std::unique_ptr<SegmentSource> source, const PoolOptions& options);
  PoolCore(const PoolCore&) = delete;
  PoolCore& operator=(const PoolCore&) = delete;
  ~PoolCore();

  void* allocate(std::size_t bytes, StreamRef home);
  // An empty `stream` means the block's home stream (the one given to allocate, if any).
  void deallocate(void* p, StreamRef stream);
  void record_stream(void* p, StreamRef stream);
  // A copy on `stream` names p, any byte of an allocated block: records the stream's use of
  // that block as record_stream does (memcpy_async's automatic recording, as PyTorch's copy_
  // records its stream). False when p is in no allocated block of this pool (freed meanwhile).
  bool record_use(const void* p, StreamRef stream);
  // The usable size of an allocated block (the request rounded up to 64 bytes).
  std::size_t block_size(const void* p) const;
  // Whether p lies in one of this pool's segments (no lock; a pool being destroyed must not
  // be asked).
  bool owns(const void* p) const noexcept {
    return segment_at(reinterpret_cast<std::uintptr_t>(p)) != nullptr;
  }
  // Whether p lies in the address span this pool's segments have ever covered: no lock and no
  // segment read (a segment may be released meanwhile), so a pointer of any origin may be
  // asked; describe() then decides under the pool's lock.
  bool may_own(const void* p) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a >= span_lo_.load(std::memory_order_acquire) && a < span_hi_.load(std::memory_order_acquire);
  }
  // The pool core in one of whose segments p lies, or nullptr: one page-map lookup, no lock.
  // Valid only while that pool cannot go (the caller holds a block of it, or its owner).
  static PoolCore* at(const void* p) noexcept;
  // The hostrt::Pool this core serves (find_pool); nullptr before it is set and once the Pool
  // is gone. Set and cleared by hostrt::Pool.
  hostrt::Pool* owner() const noexcept { return owner_.load(std::memory_order_acquire); }
  void set_owner(hostrt::Pool* pool) noexcept { owner_.store(pool, std::memory_order_release); }
  // The allocated block containing p (any byte of it): its address and the size the user
  // asked for. False when p is in no allocated block of this pool (free, cached, pending).
  bool describe(const void* p, std::uintptr_t& base, std::size_t& requested) const;

  void reserve(std::size_t large_bytes, std::size_t small_bytes);
  std::size_t trim(std::size_t keep_bytes);
  void set_retain_bytes(std::size_t bytes);
  std::size_t retain_bytes() const noexcept { return retain_bytes_.load(std::memory_order_relaxed); }
  void synchronize();
  void flush_thread_cache();
  PoolStats stats() const;
  void reset_peak_stats();
  const PoolOptions& options() const noexcept { return options_; }

  // For a pool whose streams own it (a stream's staging): destruction returns the segments at
  // once instead of waiting for pending frees, whose jobs hold their own references on the
  // BOs. Set before first use.
  void abandon_pending_on_destroy() noexcept { abandon_pending_ = true; }

  // The device behind the segment source was closed (Device::close, hrtDeviceReset): from now
  // on allocate() and reserve() throw DeviceLost, while frees, record_stream, trim, stats and
  // synchronize go on working (the blocks stay valid until freed). Every thread's warm path
  // misses from then on (its cache epoch never matches again), so the check costs the warm
  // path nothing. Idempotent.
  void source_closed() noexcept;
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  // The hostrt::Pool that owned this core was destroyed while PoolBuffers or
  // PoolMemoryResources still hold it (as cudaMemPoolDestroy, blocks stay valid until freed):
  // closed as above, with that reason in the errors.
  void owner_destroyed() noexcept;

  // Internal: a thread that used this pool is exiting.
  void retire(CacheLink& link) noexcept;

 private:
  using SegmentList = std::vector<std::unique_ptr<Segment>>;
  // Stream references the pending queues let go of: dropped after the lock (see reclaim).
  using StreamKeeps = std::vector<std::shared_ptr<const void>>;

  // UsedAfterFork in a child process forked after the pool was made.
  void check_process(const char* what) const;
  ThreadCache& cache(std::unique_lock<std::mutex>& exit_lock);
  ThreadCache& exit_cache(std::unique_lock<std::mutex>& exit_lock);
  ThreadCache& bind_thread();
  Block* find_allocated(const void* p) const;
  SlotEntry find_allocated(const void* p, ThreadCache& tc) const;
  void* allocate_slow(std::size_t bytes, StreamRef home);
  // The warm allocate above ThreadCache::kDirectLimit (a hashed bin's pop), tail-called.
  void* allocate_hashed(ThreadCache& tc, std::size_t bytes, StreamRef home);
  void* allocate_from_arena(ThreadCache& tc, std::size_t bytes, std::size_t rounded, StreamRef home);
  void carve_ahead_locked(ThreadCache& tc, const Block* b) noexcept;
  // carve_ahead_locked: how many blocks, and up to which size (the indexed bins' sizes).
  static constexpr std::size_t kCarveAhead = 3;
  static constexpr std::size_t kCarveLimit = 16u << 10;
  static constexpr std::size_t kNoLimit = PoolOptions{}.max_bytes;
  void deallocate_slow(void* p, StreamRef stream);
  // The warm free of a block above ThreadCache::kDirectLimit: its push is not inlined, so it is
  // tail-called, and the warm free itself makes no call.
  // Six register arguments at most, for the tail call: the cache is tl_fast's.
  void deallocate_hashed(Block* b, void* p, std::size_t size, StreamRef stream);
  static void park(ThreadCache& tc, Block* b) noexcept;
  void hand_out(ThreadCache& tc, Block* b, std::size_t bytes, StreamRef home) noexcept;
  // A free that fits the thread cache once other cached blocks go back to the arena; false
  // when a flush request came first (the block went to the arena, the cache was drained).
  template <typename Commit>
  bool park_evicting(ThreadCache& tc, Block* b, Commit& commit);
  template <typename Commit>
  void free_locked_path(ThreadCache& tc, Block* b, Commit& commit);
  // A thread's deferred frees (DeferredFrees): keep a waiting free with the thread (false:
  // nothing changed, take the shared path); take back one of `rounded` bytes whose work has
  // ended; under the arena lock, move the ended ones into the arena (`ended_only`) or all of
  // them into the shared queues; and the latter for every thread. The movers return how many
  // blocks moved.
  template <typename Commit>
  bool defer_free(ThreadCache& tc, Block* b, Commit& commit);
  Block* take_deferred(ThreadCache& tc, std::size_t rounded) noexcept;
  std::size_t settle_deferred_locked(ThreadCache& tc, bool ended_only, StreamKeeps& released) noexcept;
  std::size_t adopt_deferred_locked() noexcept;
  void collect_waits(Block* b, StreamRef stream) const;  // no pool lock held
  void reclaim_locked(StreamKeeps& released) noexcept;
  void release_above_retained_locked(SegmentList& doomed) noexcept;
  void drain_locked(ThreadCache& tc) noexcept;
  void sample_peaks_locked() noexcept;
  void grow(std::size_t bytes, SizeClass cls, bool dedicated = false);
  PoolStats stats_locked() const;
  [[noreturn]] void throw_out_of_memory(std::size_t bytes, const char* why) const;

  const std::uint64_t id_;
  const PoolOptions options_;
  std::unique_ptr<SegmentSource> source_;
  std::atomic<std::size_t> retain_bytes_;
  std::atomic<std::uint64_t> flush_epoch_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> owner_destroyed_{false};
  // A cache's epoch_seen once the pool is closed: flush_epoch_ never gets there.
  static constexpr std::uint64_t kClosedEpoch = ~std::uint64_t{0};
  std::uint64_t epoch_for_caches() const noexcept {
    return closed() ? kClosedEpoch : flush_epoch_.load(std::memory_order_relaxed);
  }
  bool abandon_pending_ = false;
  const std::uint64_t fork_generation_;

  // Everything above is read by the warm paths and written rarely; from here on the slow
  // paths write (the lock word, the arena's counters). A line of its own apart.
  alignas(64) mutable std::mutex mu_;
  // This pool's segment holding addr, or nullptr (the page map holds every pool's).
  const Segment* segment_at(std::uintptr_t addr) const noexcept {
    const Segment* s = PageMap::process().lookup(addr);
    return s != nullptr && s->owner == this ? s : nullptr;
  }
  std::atomic<hostrt::Pool*> owner_{nullptr};
  // The span every segment so far lies in (only ever widened, under the arena lock).
  std::atomic<std::uintptr_t> span_lo_{~std::uintptr_t{0}};
  std::atomic<std::uintptr_t> span_hi_{0};
  Arena arena_;
  PendingFrees pending_;
  std::size_t growing_ = 0;  // bytes of segments being allocated (no lock held) right now
  std::size_t peak_reserved_ = 0;
  mutable std::size_t peak_allocated_ = 0;
  mutable std::size_t peak_requested_ = 0;
  std::uint64_t misses_ = 0;
  std::uint64_t grown_allocations_ = 0;  // allocations that had to grow the pool
  std::uint64_t frees_waited_ = 0;
  std::uint64_t waits_ = 0;
  std::uint64_t segments_released_ = 0;

  // The cache of threads whose thread_locals are gone (see cache()); taken before mu_.
  std::mutex exit_mu_;
  std::shared_ptr<CacheLink> exit_link_;

  mutable std::mutex registry_mu_;
  std::vector<std::shared_ptr<CacheLink>> links_;
  struct Retired {
    std::int64_t allocated = 0, requested = 0;
    std::uint64_t allocations = 0, deallocations = 0;
    std::uint64_t frees_deferred = 0;
    std::int64_t deferred = 0;
  } retired_;
};

}  // namespace hostrt::detail::pool
