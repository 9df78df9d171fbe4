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
#include <cstddef>
#include <mutex>

#include "detail/pool/block.hpp"

namespace hostrt::detail::pool {

class DeferredFrees {
 public:
  static constexpr std::size_t kSlots = 64;

  std::mutex m;  // guards everything below and the listed blocks' side records

  bool full() const noexcept { return count_ == kSlots; }
  bool empty() const noexcept { return count_ == 0; }
  std::size_t bytes() const noexcept { return bytes_; }

  // b is Pending, with its waits and the references keeping their streams alive.
  void push(Block* b) noexcept {
    blocks_[count_++] = b;
    bytes_ += b->size;
  }
  // Removes every block for which take(b) returns true (order is not kept); take may hand the
  // block on (to the arena, which may merge it away).
  template <typename F>
  void remove_if(F&& take) {
    for (std::size_t i = 0; i < count_;) {
      Block* b = blocks_[i];
      const std::size_t size = b->size;
      if (take(b)) {
        bytes_ -= size;
        blocks_[i] = blocks_[--count_];
      } else {
        ++i;
      }
    }
  }

 private:
  std::array<Block*, kSlots> blocks_{};
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
