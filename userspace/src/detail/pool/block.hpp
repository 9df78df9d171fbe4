// Block and Segment: the pool's bookkeeping for pinned memory. A segment is one piece from the
// SegmentSource, tiled by blocks in address order; a block is what allocate() hands out.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <set>
#include <utility>
#include <vector>

#include "detail/pool/align.hpp"
#include "detail/pool/segment_source.hpp"
#include "detail/pool/slot_table.hpp"
#include "detail/pool/stream_ref.hpp"

namespace hostrt::detail::pool {

struct Segment;
struct Block;
class PoolCore;

// Orders free blocks by (size, address): best fit is a lower_bound. Defined after Block.
struct BlockBySize {
  using is_transparent = void;
  bool operator()(const Block* a, const Block* b) const noexcept;
  bool operator()(const Block* a, const std::pair<std::size_t, std::uintptr_t>& k) const noexcept;
  bool operator()(const std::pair<std::size_t, std::uintptr_t>& k, const Block* b) const noexcept;
};
// The arena's free index. A block out of the index keeps the tree node it had in `node`, so
// putting it back (every free) allocates nothing and cannot fail.
using FreeIndex = std::set<Block*, BlockBySize>;

// Who may touch a block, and therefore which lock (if any) guards its fields:
//  Free      in the arena's free index (arena lock);
//  Allocated held by the user (the user's own synchronization: only the holder frees it);
//  Recorded  Allocated, with record_stream uses (side->uses not empty; set under the arena
//            lock): one state rather than a flag beside it, so that the warm free's one
//            compare of the state sends such a block to the slow path;
//  Cached    parked, reusable, in one thread's cache (that thread only);
//  Pending   freed, waiting for device points (arena lock; in a thread's DeferredFrees, that
//            list's lock).
// The state itself is atomic because the arena reads a neighbour's state while coalescing,
// while the neighbour's holder may be moving it between Allocated and Cached without a lock.
enum class BlockState : std::uint8_t { Free, Allocated, Cached, Pending, Recorded };

// What only a block with recorded uses or a waiting free needs, apart from Block so that the
// blocks the warm paths touch stay small (a block's header was 192 bytes with these inside;
// it is 104 without). Made on first need and kept, with its vectors' capacity, for the
// block's life, so the pending path allocates nothing in steady state. Guarded as the fields were: uses and
// use_keeps by the holder and the arena lock (record_stream), waits and keeps by the freeing
// thread, then the arena lock once Pending.
struct alignas(64) BlockWaits {
  std::vector<StreamRef> uses;                         // streams named by record_stream()
  std::vector<std::shared_ptr<const void>> use_keeps;  // keep those alive until the free
  WaitList waits;  // Pending: points still to be reached, next one at back()
  // Pending: references keeping every stream in `waits` alive until the block is reusable
  // (the user may destroy a stream right after the free, or a recorded one before it).
  KeepList keeps;
};

// Adds to w.keeps a reference to each stream in w.waits (the user may destroy a stream right
// after the free). Throws std::bad_alloc, possibly having added some.
inline void retain_waits(BlockWaits& w) {
  for (const StreamPoint& p : w.waits)
    if (auto k = p.stream.retain()) w.keeps.push_back(std::move(k));
}

// Cache-line aligned: blocks of two threads' frees would otherwise share lines (their headers
// come from one heap, interleaved), and each thread's writes on its own blocks (state, home,
// links) evicted the other's. Two threads on the pending path scaled 1.65-1.87x without it,
// 1.83-2.0x with it (pool_bench PendingHost, the two builds alternating).
// A reusable block's stream references go to `released`, for the caller to drop after its
// locks (a last reference destroys a stream, which calls the driver).
inline void hand_over_keeps(BlockWaits& w, std::vector<std::shared_ptr<const void>>& released) noexcept {
  for (auto& k : w.keeps) {
    try {
      released.push_back(std::move(k));
    } catch (const std::bad_alloc&) {
      k.reset();  // out of host memory: dropped here, under the caller's lock
    }
  }
  w.keeps.clear();
}

struct alignas(64) Block {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // address-order neighbours in the segment (arena lock)
  Block* next = nullptr;
  Block* cache_next = nullptr;  // link in a thread-cache bin
  std::atomic<BlockState> state{BlockState::Free};
  std::size_t requested = 0;  // bytes the current holder asked for
  // The stream given to allocate(), the default for deallocate(): by id, holding no
  // reference (the user may destroy it before the free); found again through home_ops->find.
  std::uint64_t home_id = 0;  // 0: none
  const StreamOps* home_ops = nullptr;
  std::unique_ptr<BlockWaits> side;  // see BlockWaits; always there while Pending
  std::uint64_t pending_seq = 0;     // Pending: order of the free, for "oldest pending work"
  FreeIndex::node_type node;         // while out of the free index (arena lock)

  void* ptr() const noexcept { return reinterpret_cast<void*>(addr); }
  // Throws std::bad_alloc the first time, having changed nothing.
  BlockWaits& side_record() {
    if (!side) side = std::make_unique<BlockWaits>();
    return *side;
  }
  // A free of this block has points left to wait for.
  bool waiting() const noexcept { return side && !side->waits.empty(); }
  BlockState load_state() const noexcept { return state.load(std::memory_order_relaxed); }
  // Held by a user: Allocated or Recorded.
  bool allocated() const noexcept {
    const BlockState s = load_state();
    return s == BlockState::Allocated || s == BlockState::Recorded;
  }
  bool recorded() const noexcept { return load_state() == BlockState::Recorded; }
  void set_state(BlockState s) noexcept { state.store(s, std::memory_order_relaxed); }
};

inline bool BlockBySize::operator()(const Block* a, const Block* b) const noexcept {
  return std::pair(a->size, a->addr) < std::pair(b->size, b->addr);
}
inline bool BlockBySize::operator()(const Block* a,
                                    const std::pair<std::size_t, std::uintptr_t>& k) const noexcept {
  return std::pair(a->size, a->addr) < k;
}
inline bool BlockBySize::operator()(const std::pair<std::size_t, std::uintptr_t>& k,
                                    const Block* b) const noexcept {
  return k < std::pair(b->size, b->addr);
}

struct Segment {
  std::unique_ptr<SegmentMemory> memory;
  std::uintptr_t base = 0;  // usable range: page-aligned inside memory
  std::size_t size = 0;
  std::size_t reserved = 0;  // memory->size(): what the driver charges
  SizeClass cls = SizeClass::Small;
  // One large block's own segment, made for a miss: never split, reused whole by a request
  // that wastes at most an eighth of it (see Arena::fit_in).
  bool dedicated = false;
  const PoolCore* owner = nullptr;  // the pool whose segment this is (the page map is shared)
  SlotTable slots;                  // block start -> Block*, read without a lock by deallocate()
  Block* first = nullptr;
  std::size_t free_bytes = 0;  // in Free blocks

  bool idle() const noexcept { return first != nullptr && first->next == nullptr && free_bytes == size; }
  bool contains(std::uintptr_t p) const noexcept { return p >= base && p < base + size; }
};

}  // namespace hostrt::detail::pool
