// PendingFrees: blocks freed while device work that used them may still run. One FIFO per
// stream (by id; erased when it empties), in submission order, so a slow stream only delays the blocks freed
// on it. A block that several streams used (record_stream) waits in one queue at a time: when its point on
// that stream is reached it moves on to the next stream it still waits for.
// Caller holds the arena lock; reached() reads the completion page, no syscall.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <optional>
#include <unordered_map>
#include <vector>

#include "detail/pool/block.hpp"

namespace hostrt::detail::pool {

class PendingFrees {
 public:
  // b->side->waits is non-empty; b becomes Pending. Throws std::bad_alloc (queue growth), and then
  // nothing changed: b is not queued and its keeps are as they were. `retained`: b->side->keeps
  // already holds a reference for each of its waits (a thread's deferred free).
  void add(Block* b, bool retained = false);
  // Moves every block whose points have all been reached out of the queues, calling
  // ready(block) for each. Returns how many became ready. The references of streams nothing
  // waits on any more go to `released`, for the caller to drop after its lock: dropping the
  // last one destroys the stream, which calls the driver.
  template <typename F>
  std::size_t reclaim(F&& ready, std::vector<std::shared_ptr<const void>>& released);
  // The head of the queue whose head block was freed first: what a pool out of memory waits for.
  std::optional<HeldPoint> oldest() const;
  // The last pending point of every stream: what synchronize() waits for.
  std::vector<HeldPoint> last_points() const;

  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t blocks() const noexcept { return blocks_; }
  bool empty() const noexcept { return blocks_ == 0; }
  std::size_t queues() const noexcept { return queues_.size(); }

 private:
  struct Queue {
    StreamRef stream;
    std::shared_ptr<const void> keep;  // the stream's own reference, while blocks wait on it
    std::deque<Block*> blocks;         // each waits for blocks[i]->side->waits.back() on this stream
  };
  void enqueue(Block* b);

  std::unordered_map<std::uint64_t, Queue> queues_;
  std::size_t bytes_ = 0;
  std::size_t blocks_ = 0;
  std::uint64_t seq_ = 0;
};

template <typename F>
std::size_t PendingFrees::reclaim(F&& ready, std::vector<std::shared_ptr<const void>>& released) {
  std::size_t done = 0;
  std::vector<Block*> moving;
  for (auto it = queues_.begin(); it != queues_.end();) {
    Queue& q = it->second;
    while (!q.blocks.empty()) {
      Block* b = q.blocks.front();
      if (!q.stream.reached(b->side->waits.back().point)) break;
      q.blocks.pop_front();
      b->side->waits.pop_back();
      while (!b->side->waits.empty() && b->side->waits.back().stream.reached(b->side->waits.back().point))
        b->side->waits.pop_back();
      if (b->side->waits.empty()) {
        bytes_ -= b->size;
        --blocks_;
        ++done;
        hand_over_keeps(*b->side, released);
        ready(b);
      } else {
        moving.push_back(b);  // not now: enqueue() may rehash the map being iterated
      }
    }
    // Nothing waits on this stream any more: let it go, and its queue (a program that makes
    // a stream per task would otherwise leave one behind per stream ever freed on).
    if (!q.blocks.empty()) {
      ++it;
      continue;
    }
    if (q.keep) {
      try {
        released.push_back(std::move(q.keep));
      } catch (const std::bad_alloc&) {
        q.keep.reset();  // out of host memory: dropped here, under the caller's lock
      }
    }
    it = queues_.erase(it);
  }
  for (Block* b : moving) enqueue(b);
  return done;
}

}  // namespace hostrt::detail::pool
