// Arena: the segments of one pool and the blocks that tile them. Best-fit over a free index
// ordered by (size, address), split on allocation, coalesced with free neighbours on free;
// small and large requests live in separate segments so small blocks never pin down large
// segments. A large miss gets a dedicated segment of its exact size, which is never split:
// large blocks freed at random would otherwise leave holes too small for the next large
// request (a quarter of the large segments' bytes, on the random trace of pool_bench).
// Single-threaded: the caller holds the pool's arena lock for every call. Nothing here calls
// the driver: segments arrive ready-made (make_segment, outside the lock) and idle ones leave
// through take_idle() to be destroyed after the lock is released.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "detail/pool/align.hpp"
#include "detail/pool/block.hpp"
#include "detail/pool/page_map.hpp"

namespace hostrt::detail::pool {

// Wraps fresh memory in a Segment (reserves its slot table: an mmap, so call it unlocked).
std::unique_ptr<Segment> make_segment(std::unique_ptr<SegmentMemory> memory, SizeClass cls,
                                      bool dedicated = false);

class Arena {
 public:
  explicit Arena(PageMap& map) noexcept : map_(map) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  // The smallest free block of class size_class_of(rounded) that holds `rounded` bytes, split
  // to exactly that size and taken out of the index (state still Free: the caller sets it).
  // An idle dedicated segment is handed out whole instead, when it is the tighter fit and
  // wastes at most rounded/kDedicatedSlackDivisor.
  Block* fit(std::size_t rounded) { return fit_in(rounded, size_class_of(rounded)); }
  // The same in the segments of class `cls`: the pool's last resort before growing.
  Block* fit_in(std::size_t rounded, SizeClass cls);
  // The next `rounded` bytes right after block b (which the caller holds), split off the free
  // block that follows it in its segment; nullptr when that block is not free, too small,
  // or of a dedicated segment. Taken out of the index as fit's are.
  Block* fit_after(const Block* b, std::size_t rounded);
  // Back into the index, merged with free neighbours.
  void free(Block* b) noexcept;
  // Throws std::bad_alloc (page-map nodes); on throw the segment is not taken.
  void add_segment(std::unique_ptr<Segment> seg);
  // The segment to add for a miss of `rounded` bytes. Large: dedicated, of the exact
  // (page-rounded) size. Small (and large with shared_large): geometric (a sixteenth of what
  // is reserved, so that the last, partly used segment costs at most ~6% of the total),
  // between min_segment and the class's cap; but when over a sixteenth of the class's
  // segments is free already, the miss is fragmentation and a geometric step would mostly
  // add free space: min_segment/16 then (large: the request alone). A request larger than
  // the step gets its exact size.
  struct Growth {
    std::size_t bytes;
    bool dedicated;
  };
  Growth next_segment(std::size_t rounded, std::size_t min_segment, bool shared_large) const noexcept;
  // Detaches idle segments, largest first, while releasing one keeps reserved >= keep_bytes.
  // Only segments of class `only` when given.
  std::vector<std::unique_ptr<Segment>> take_idle(std::size_t keep_bytes, const SizeClass* only = nullptr);
  // Detaches idle segments, largest first, until reserved <= target (or none is left).
  std::vector<std::unique_ptr<Segment>> take_idle_down_to(std::size_t target);
  bool has_idle() const noexcept;

  std::size_t reserved() const noexcept { return class_reserved_[0] + class_reserved_[1]; }
  std::size_t usable() const noexcept { return usable_; }
  std::size_t free_bytes() const noexcept { return class_free_[0] + class_free_[1]; }
  std::size_t free_bytes(SizeClass c) const noexcept { return class_free_[static_cast<int>(c)]; }
  std::size_t reserved(SizeClass c) const noexcept { return class_reserved_[static_cast<int>(c)]; }
  std::size_t segments(SizeClass c) const noexcept { return segment_count_[static_cast<int>(c)]; }
  // Bumped whenever a segment leaves the arena; read without the lock (see SegmentHint).
  std::uint64_t detach_epoch() const noexcept { return detach_epoch_.load(std::memory_order_acquire); }

 private:
  using FreeIndex = detail::pool::FreeIndex;

  FreeIndex& index(const Segment* s) noexcept {
    return s->dedicated ? dedicated_ : free_[static_cast<int>(s->cls)];
  }
  void add_free(Segment* s, std::size_t bytes) noexcept;
  void sub_free(Segment* s, std::size_t bytes) noexcept;
  void set_slot(Block* b, Block* value) noexcept;
  // Free block b of index idx (at it), split to `rounded` and taken out of the index.
  Block* take(FreeIndex& idx, FreeIndex::iterator it, std::size_t rounded);
  std::unique_ptr<Segment> detach(Segment* s) noexcept;
  // Idle segments (of class `only`, when given), largest first.
  std::vector<Segment*> idle_largest_first(const SizeClass* only = nullptr) const;

  PageMap& map_;
  FreeIndex free_[2];
  FreeIndex dedicated_;  // blocks of idle dedicated segments (class Large), one per segment
  std::vector<std::unique_ptr<Segment>> segments_;
  std::size_t segment_count_[2] = {0, 0};
  std::size_t usable_ = 0;
  std::size_t class_free_[2] = {0, 0};
  std::size_t class_reserved_[2] = {0, 0};
  // Read by every free that misses its thread's segment hint; on a line of its own, away
  // from the counters above that every slow path writes.
  alignas(64) std::atomic<std::uint64_t> detach_epoch_{0};
};

}  // namespace hostrt::detail::pool
