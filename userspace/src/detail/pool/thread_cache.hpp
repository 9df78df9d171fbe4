// ThreadCache: each thread's private stash of blocks that are free and safe to reuse, binned
// by exact (64-byte rounded) size. The pool's fast path is a pop or a push here: no lock, no
// atomic read-modify-write, no syscall. Only small blocks are cached, and only up to a byte
// budget, so a thread cannot hoard much of the pool.
//
// Sizes up to kDirectLimit have a bin each, found by indexing; larger ones share hashed bins.
// A bin keeps its head block's address beside the Block*: allocate returns it without a
// dependent load from the block, which is what bounds a warm allocate+free pair.
//
// Counters are written by the owning thread alone (plain load + store on relaxed atomics) and
// read by stats() from any thread.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "detail/pool/block.hpp"
#include "detail/pool/deferred_frees.hpp"

namespace hostrt::detail::pool {

struct ThreadCounters {
  // Rounded bytes this thread holds: allocated to its user or parked in its cache. A warm
  // allocate or free moves bytes between the two without changing this; allocated bytes are
  // held - cached (ThreadCache::cached_bytes).
  std::atomic<std::int64_t> held{0};
  // Bytes the cache may still take: its capacity less what is parked. Kept this way round
  // so that the warm free's budget test is one load and a compare.
  std::atomic<std::int64_t> room{0};
  std::atomic<std::int64_t> requested{0};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> deallocations{0};
  // Written under the deferred list's lock (by the owner or an adopting thread), read by stats().
  std::atomic<std::int64_t> deferred{0};         // bytes in the thread's DeferredFrees
  std::atomic<std::uint64_t> frees_deferred{0};  // frees that waited there (frees_waited)

  // Always inlined: on the warm paths an outlined bump (GCC's choice once the slow paths
  // grew) keeps more registers live across the call and cost ~0.5 ns per pair.
  template <typename T, typename D>
  [[gnu::always_inline]] static void bump(std::atomic<T>& c, D d) noexcept {
    c.store(c.load(std::memory_order_relaxed) + static_cast<T>(d), std::memory_order_relaxed);
  }
};

// The end of every bin's list: its address, 0, is what an empty bin's head_addr holds, so a
// pop reads the next block's address without testing for the end first (the test was a
// branch on the warm allocate). Never written, and never destroyed (threads exiting after
// static destruction still pop and drain).
union BinEnd {
  BinEnd() : block() {}
  ~BinEnd() {}
  Block block;
};
inline BinEnd g_bin_end;
inline Block* const kBinEnd = &g_bin_end.block;

class ThreadCache {
 public:
  static constexpr std::size_t kDirectLimit = 16u << 10;
  static constexpr std::size_t kHashedBins = 64;
  static constexpr std::uint32_t kBinDepth = 8;

  explicit ThreadCache(std::size_t capacity_bytes) noexcept : capacity_(capacity_bytes) {
    counters.room.store(static_cast<std::int64_t>(capacity_bytes), std::memory_order_relaxed);
  }

  // A cached block of exactly `rounded` bytes (block nullptr if none) and its address.
  struct Taken {
    Block* block;
    std::uintptr_t addr;
  };
  // For rounded <= kDirectLimit: the warm path's pop, an indexed bin.
  [[gnu::always_inline]] Taken pop_direct(std::size_t rounded) noexcept {
    return take(direct_[rounded / kAlignment], rounded);
  }
  // For kDirectLimit < rounded <= kSmallLimit: a hashed bin's pop.
  Taken pop_hashed(std::size_t rounded) noexcept {
    Bin* bin = find(rounded);
    return bin != nullptr ? take(*bin, rounded) : Taken{nullptr, 0};
  }
  Taken pop(std::size_t rounded) noexcept {
    return rounded <= kDirectLimit ? pop_direct(rounded) : pop_hashed(rounded);
  }

  // Parks block b (at addr, of `size` bytes). False when it does not fit the budget or both
  // bins it may use hold other sizes: the caller then returns it to the arena.
  [[gnu::always_inline]] bool push(Block* b, std::uintptr_t addr, std::size_t size) noexcept {
    if (size <= kDirectLimit) [[likely]]
      return push_direct(b, addr, size);
    return push_hashed(b, addr, size);
  }
  bool push_hashed(Block* b, std::uintptr_t addr, std::size_t size) noexcept {
    if (size > room() || size > kSmallLimit) return false;
    Bin* bin = find(size);
    if (bin == nullptr) {
      // Two-way associative: a size takes whichever of its two bins is empty.
      const std::size_t i = hashed_bin_of(size);
      bin = hashed_[i].count == 0 ? &hashed_[i] : hashed_[i ^ 1].count == 0 ? &hashed_[i ^ 1] : nullptr;
      if (bin == nullptr) return false;
      bin->size = size;
    }
    return put(*bin, b, addr, size);
  }
  // Whether push(b, addr, size) would park the block (changes nothing).
  bool can_push(std::size_t size) noexcept { return size <= room() && has_bin_for(size); }
  // Whether a block of `size` would have a bin if the budget had room for it.
  bool has_bin_for(std::size_t size) noexcept {
    if (size <= kDirectLimit) return direct_[size / kAlignment].count < kBinDepth;
    if (size > kSmallLimit) return false;
    if (Bin* bin = find(size)) return bin->count < kBinDepth;
    const std::size_t i = hashed_bin_of(size);
    return hashed_[i].count == 0 || hashed_[i ^ 1].count == 0;
  }
  // For 0 < size <= kDirectLimit: the warm path's push, onto an indexed bin.
  [[gnu::always_inline]] bool push_direct(Block* b, std::uintptr_t addr, std::size_t size) noexcept {
    if (size > room()) return false;
    return put(direct_[size / kAlignment], b, addr, size);
  }

  // Whether evict_for(size, f) would make room (changes nothing): the budget can hold the
  // block, its bin has space, and the cached blocks of other sizes free enough.
  bool can_evict_for(std::size_t size) noexcept {
    if (size > capacity_ || size > kSmallLimit || !has_bin_for(size)) return false;
    std::size_t others = 0;
    for (const Bin& bin : hashed_)
      if (bin.count != 0 && bin.size != size) others += bin.size * bin.count;
    for (std::size_t i = 1; i < direct_.size(); ++i)
      if (i * kAlignment != size) others += direct_[i].count * i * kAlignment;
    return room() + others >= size;
  }
  // Makes room for a block of `size`, which can_evict_for said possible, by handing cached
  // blocks of other sizes to f, largest first (the fewest go).
  template <typename F>
  void evict_for(std::size_t size, F&& f) {
    while (room() < size) {
      Bin* best = nullptr;
      std::size_t best_size = 0;
      for (Bin& bin : hashed_)
        if (bin.count != 0 && bin.size != size && bin.size > best_size) {
          best = &bin;
          best_size = bin.size;
        }
      for (std::size_t i = direct_.size() - 1; best == nullptr && i >= 1; --i)
        if (direct_[i].count != 0 && i * kAlignment != size) {
          best = &direct_[i];
          best_size = i * kAlignment;
        }
      Block* b = take(*best, best_size).block;
      b->cache_next = nullptr;
      f(b);
    }
  }

  // Counts the frees with nothing to wait for that found no room here in a row, of one size
  // (the slow free's alone). Only a size that keeps coming back without room may evict
  // (evict_for): what is cached instead is staler. A series of drifting sizes never does (it
  // would park blocks no later request fits), nor do sizes that merely recur among others.
  // Eight in a row: at two, the small-block trace of pool_bench churned its cache (reserved /
  // peak 1.090-1.100 over five runs, against 1.091-1.095 without eviction and 1.088-1.091 at
  // eight); a size that stays, as a staging buffer's, is warm after eight slow frees.
  bool unparked_again(std::size_t size) noexcept {
    unparked_run_ = size == unparked_size_ ? unparked_run_ + 1 : 1;
    unparked_size_ = size;
    return unparked_run_ >= kEvictAfter;
  }
  static constexpr std::uint32_t kEvictAfter = 8;

  // Whether this thread's last arena allocation was of this size too (the slow allocate's
  // alone): a working set of one size growing, which PoolCore::carve_ahead_locked serves.
  bool arena_again(std::size_t size) noexcept {
    const bool again = size == arena_size_;
    arena_size_ = size;
    return again;
  }

  // Empties the cache, handing each block to f.
  template <typename F>
  void drain(F&& f) {
    auto empty = [&f](Bin& bin) {
      while (bin.head != kBinEnd) {
        Block* b = bin.head;
        bin.head = b->cache_next;
        b->cache_next = nullptr;
        f(b);
      }
      bin.head_addr = 0;
      bin.count = 0;
    };
    for (Bin& bin : direct_) empty(bin);
    for (Bin& bin : hashed_) empty(bin);
    counters.room.store(static_cast<std::int64_t>(capacity_), std::memory_order_relaxed);
  }

  // Bytes parked here. Any thread (stats).
  std::int64_t cached_bytes() const noexcept {
    return static_cast<std::int64_t>(capacity_) - counters.room.load(std::memory_order_relaxed);
  }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(cached_bytes()); }
  std::size_t room() const noexcept {
    return static_cast<std::size_t>(counters.room.load(std::memory_order_relaxed));
  }

  std::size_t capacity() const noexcept { return capacity_; }

  ThreadCounters counters;
  std::uint64_t epoch_seen = 0;  // the pool's flush epoch this cache last obeyed

  // The segment this thread last freed into, so that most frees skip the page map's three
  // levels. Valid while the arena's detach epoch is unchanged: a segment is only detached
  // when idle, so one holding the block being freed cannot go while the hint is used.
  struct SegmentHint {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    SlotTable::View slots;
    std::uint64_t epoch = ~std::uint64_t{0};
  } hint;

 private:
  struct Bin {
    Block* head = kBinEnd;  // head_addr == 0: empty
    std::uintptr_t head_addr = 0;
    std::size_t size = 0;  // hashed bins: the size they hold (kept when emptied, until reused)
    std::uint32_t count = 0;
  };
  [[gnu::always_inline]] bool put(Bin& bin, Block* b, std::uintptr_t addr, std::size_t size) noexcept {
    if (bin.count >= kBinDepth) return false;
    b->cache_next = bin.head;
    bin.head = b;
    bin.head_addr = addr;
    ++bin.count;
    ThreadCounters::bump(counters.room, -static_cast<std::int64_t>(size));
    return true;
  }
  [[gnu::always_inline]] Taken take(Bin& bin, std::size_t rounded) noexcept {
    const std::uintptr_t addr = bin.head_addr;
    if (addr == 0) return {nullptr, 0};
    Block* b = bin.head;
    Block* next = b->cache_next;
    bin.head = next;
    bin.head_addr = next->addr;  // kBinEnd's is 0
    --bin.count;
    ThreadCounters::bump(counters.room, rounded);
    return {b, addr};
  }
  // The hashed bin holding blocks of this size, if any.
  Bin* find(std::size_t rounded) noexcept {
    const std::size_t i = hashed_bin_of(rounded);
    if (hashed_[i].size == rounded && hashed_[i].count != 0) return &hashed_[i];
    if (hashed_[i ^ 1].size == rounded && hashed_[i ^ 1].count != 0) return &hashed_[i ^ 1];
    return nullptr;
  }
  // Fibonacci hashing of the size in 64-byte units: sizes that are multiples of large powers
  // of two (64 KiB, 256 KiB...) would all land in one bin with a plain modulo.
  static std::size_t hashed_bin_of(std::size_t rounded) noexcept {
    return static_cast<std::size_t>(((rounded >> 6) * 0x9E3779B97F4A7C15ull) >> 58);
  }

  // Indexed by size / kAlignment, bin 0 unused: with the "- 1" GCC addressed one bin from
  // two base registers on the warm free.
  std::array<Bin, kDirectLimit / kAlignment + 1> direct_{};
  std::array<Bin, kHashedBins> hashed_{};
  std::size_t capacity_;
  std::size_t unparked_size_ = 0;
  std::uint32_t unparked_run_ = 0;
  std::size_t arena_size_ = 0;

 public:
  // Last: the slow paths' alone, away from what the warm paths read.
  DeferredFrees deferred;
};

}  // namespace hostrt::detail::pool
