// DeferredFrees: a thread's own stream-ordered frees still waiting for the device, kept with
// the thread instead of in the pool's shared pending queues. A thread that frees on a stream
// mostly allocates again on that stream: its next allocation of the same size takes a block
// whose work has ended straight from here, and neither the free nor the allocation takes the
// pool's arena lock (two threads on the pending path shared that lock for every block, and ran
// slower than one).
//
// Bounded like the thread cache (kSlots blocks and the cache's byte budget), and visible to
// the whole pool: synchronize(), the out-of-memory path and trim() adopt every thread's
// deferred frees into the shared queues, under the list's own lock. Only its thread adds or
// takes; any thread may adopt. Lock order: the arena lock, the registry lock, then this one.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <thread>

#include "detail/pool/block.hpp"

namespace hostrt::detail::pool {

// The list's lock: taken by its owner on every pending free and allocation miss, by another
// thread only to adopt the list. Uncontended, an exchange and a plain store (a pthread mutex
// costs a call and a second atomic read-modify-write on unlock); contended, the waiter yields
// (its holder may be preempted on a busy machine).
class DeferLock {
 public:
  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire))
      while (held_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

// Its own cache lines: the owner writes it on every pending free, an adopter from another
// thread now and then; the warm paths' bins and counters stay apart.
class alignas(64) DeferredFrees {
 public:
  static constexpr std::size_t kSlots = 64;

  DeferLock m;  // guards everything below and the listed blocks' side records

  bool full() const noexcept { return count_ == kSlots; }
  bool empty() const noexcept { return count_ == 0; }
  std::size_t bytes() const noexcept { return bytes_; }

  // b is Pending, with its waits and the references keeping their streams alive.
  void push(Block* b) noexcept {
    at(count_++) = b;
    bytes_ += b->size;
  }
  // Removes every block for which take(b) returns true, oldest first, keeping the order of the
  // rest (the oldest frees are the likeliest to have ended: a scan for one stops early). take
  // may hand the block on (to the arena, which may merge it away). Stops after the first block
  // taken when `first_only`: then only the blocks before it move (none, when it is the oldest),
  // where compacting the whole list on every take cost more than the rest of the allocation.
  template <typename F>
  void remove_if(F&& take, bool first_only = false) {
    if (first_only) {
      for (std::size_t k = 0; k < count_; ++k) {
        Block* b = at(k);
        const std::size_t size = b->size;
        if (take(b)) {
          bytes_ -= size;
          for (std::size_t j = k; j > 0; --j) at(j) = at(j - 1);
          head_ = (head_ + 1) & kMask;
          --count_;
          return;
        }
      }
      return;
    }
    std::size_t kept = 0;
    for (std::size_t k = 0; k < count_; ++k) {
      Block* b = at(k);
      const std::size_t size = b->size;
      if (take(b))
        bytes_ -= size;
      else
        at(kept++) = b;
    }
    count_ = kept;
  }

 private:
  static constexpr std::size_t kMask = kSlots - 1;
  static_assert((kSlots & kMask) == 0, "a ring of a power of two");
  // The k-th oldest block: a ring, so that taking the oldest moves nothing.
  Block*& at(std::size_t k) noexcept { return blocks_[(head_ + k) & kMask]; }

  std::array<Block*, kSlots> blocks_{};
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::size_t bytes_ = 0;
};

// Every point of b's free is seen reached (no syscall: the completion pages).
inline bool waits_reached(const Block* b) noexcept {
  for (const StreamPoint& w : b->side->waits)
    if (!w.stream.reached(w.point)) return false;
  return true;
}

}  // namespace hostrt::detail::pool
