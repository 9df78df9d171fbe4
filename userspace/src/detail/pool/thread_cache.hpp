// ThreadCache: each thread's private stash of blocks that are free and safe to reuse, binned
// by exact (64-byte rounded) size. The pool's fast path is a pop or a push here: no lock, no
// atomic read-modify-write, no syscall. Only small blocks are cached, and only up to a byte
// budget, so a thread cannot hoard much of the pool.
//
// Counters are written by the owning thread alone (plain load + store on relaxed atomics) and
// read by stats() from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "detail/pool/block.hpp"

namespace hostrt::detail::pool {

struct ThreadCounters {
  std::atomic<std::int64_t> allocated{0};  // rounded bytes: + on allocate, - on deallocate
  std::atomic<std::int64_t> requested{0};
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> deallocations{0};
  std::atomic<std::int64_t> cached{0};  // bytes parked in this thread's cache

  template <typename T, typename D>
  static void bump(std::atomic<T>& c, D d) noexcept {
    c.store(c.load(std::memory_order_relaxed) + static_cast<T>(d), std::memory_order_relaxed);
  }
};

class ThreadCache {
 public:
  static constexpr std::size_t kBins = 64;
  static constexpr std::uint32_t kBinDepth = 8;

  explicit ThreadCache(std::size_t capacity_bytes) noexcept : capacity_(capacity_bytes) {}

  Block* pop(std::size_t rounded) noexcept {
    Bin* bin = find(rounded);
    if (bin == nullptr || bin->head == nullptr) return nullptr;
    Block* b = bin->head;
    bin->head = b->cache_next;
    --bin->count;
    ThreadCounters::bump(counters.cached, -static_cast<std::int64_t>(rounded));
    return b;
  }

  // False when the block does not fit the budget or both bins it may use hold other sizes:
  // the caller then returns it to the arena.
  bool push(Block* b) noexcept {
    if (b->size > capacity_ - bytes() || b->size > kSmallLimit) return false;
    Bin* bin = find(b->size);
    if (bin == nullptr) {
      // Two-way associative: a size takes whichever of its two bins is empty.
      const std::size_t i = bin_of(b->size);
      bin = bins_[i].count == 0 ? &bins_[i] : bins_[i ^ 1].count == 0 ? &bins_[i ^ 1] : nullptr;
      if (bin == nullptr) return false;
      bin->size = b->size;
    } else if (bin->count >= kBinDepth) {
      return false;
    }
    b->cache_next = bin->head;
    bin->head = b;
    ++bin->count;
    ThreadCounters::bump(counters.cached, b->size);
    return true;
  }

  // Empties the cache, handing each block to f.
  template <typename F>
  void drain(F&& f) {
    for (Bin& bin : bins_) {
      while (Block* b = bin.head) {
        bin.head = b->cache_next;
        b->cache_next = nullptr;
        f(b);
      }
      bin.count = 0;
    }
    counters.cached.store(0, std::memory_order_relaxed);
  }

  std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(counters.cached.load(std::memory_order_relaxed));
  }

  ThreadCounters counters;
  std::uint64_t epoch_seen = 0;  // the pool's flush epoch this cache last obeyed

  // The segment this thread last freed into, so that most frees skip the page map's three
  // levels. Valid while the arena's detach epoch is unchanged: a segment is only detached
  // when idle, so one holding the block being freed cannot go while the hint is used.
  struct SegmentHint {
    std::uintptr_t base = 0;
    std::size_t size = 0;
    Block* const* slots = nullptr;
    std::uint64_t epoch = ~std::uint64_t{0};
  } hint;

 private:
  struct Bin {
    std::size_t size = 0;
    std::uint32_t count = 0;
    Block* head = nullptr;
  };
  // Fibonacci hashing of the size in 64-byte units: sizes that are multiples of large powers
  // of two (4 KiB, 64 KiB...) would all land in one bin with a plain modulo.
  // The bin holding blocks of this size, if any (an emptied bin keeps its size until reused).
  Bin* find(std::size_t rounded) noexcept {
    const std::size_t i = bin_of(rounded);
    if (bins_[i].size == rounded && bins_[i].count != 0) return &bins_[i];
    if (bins_[i ^ 1].size == rounded && bins_[i ^ 1].count != 0) return &bins_[i ^ 1];
    return nullptr;
  }
  static std::size_t bin_of(std::size_t rounded) noexcept {
    return static_cast<std::size_t>(((rounded >> 6) * 0x9E3779B97F4A7C15ull) >> 58);
  }

  std::array<Bin, kBins> bins_{};
  std::size_t capacity_;
};

}  // namespace hostrt::detail::pool
