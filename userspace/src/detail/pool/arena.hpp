// Arena: the segments of one pool and the blocks that tile them. Best-fit over a free index
// ordered by (size, address), split on allocation, coalesced with free neighbours on free;
// small and large requests live in separate segments so small blocks never pin down large
// segments. Single-threaded: the caller holds the pool's arena lock for every call. Nothing
// here calls the driver: segments arrive ready-made (make_segment, outside the lock) and
// idle ones leave through take_idle() to be destroyed after the lock is released.
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
std::unique_ptr<Segment> make_segment(std::unique_ptr<SegmentMemory> memory, SizeClass cls);

class Arena {
 public:
  explicit Arena(PageMap& map) noexcept : map_(map) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  // The smallest free block of class size_class_of(rounded) that holds `rounded` bytes, split
  // to exactly that size and taken out of the index (state still Free: the caller sets it).
  Block* fit(std::size_t rounded) { return fit_in(rounded, size_class_of(rounded)); }
  // The same in the segments of class `cls`: the pool's last resort before growing.
  Block* fit_in(std::size_t rounded, SizeClass cls);
  // Back into the index, merged with free neighbours.
  void free(Block* b) noexcept;
  // Throws std::bad_alloc (page-map nodes); on throw the segment is not taken.
  void add_segment(std::unique_ptr<Segment> seg);
  // Size of the next segment for a miss of `rounded` bytes: geometric (a sixteenth of what is
  // reserved, so that the last, partly used segment costs at most ~6% of the total), between
  // min_segment and the class's cap; a request larger than that step, or a large request while
  // over a sixteenth of the pool is free (fragmentation), gets a segment of its own exact
  // (page-rounded) size.
  std::size_t next_segment_size(std::size_t rounded, std::size_t min_segment) const noexcept;
  // Detaches idle segments, largest first, while releasing one keeps reserved >= keep_bytes.
  // Only segments of class `only` when given.
  std::vector<std::unique_ptr<Segment>> take_idle(std::size_t keep_bytes, const SizeClass* only = nullptr);
  bool has_idle() const noexcept;

  std::size_t reserved() const noexcept { return reserved_; }
  std::size_t usable() const noexcept { return usable_; }
  std::size_t free_bytes() const noexcept { return free_bytes_; }
  std::size_t segments(SizeClass c) const noexcept { return segment_count_[static_cast<int>(c)]; }
  std::size_t largest_free(SizeClass c) const noexcept;
  // Bumped whenever a segment leaves the arena; read without the lock (see SegmentHint).
  std::uint64_t detach_epoch() const noexcept { return detach_epoch_.load(std::memory_order_acquire); }

 private:
  using FreeIndex = detail::pool::FreeIndex;

  FreeIndex& index(const Segment* s) noexcept { return free_[static_cast<int>(s->cls)]; }
  void set_slot(Block* b, Block* value) noexcept;
  std::unique_ptr<Segment> detach(Segment* s) noexcept;

  PageMap& map_;
  FreeIndex free_[2];
  std::vector<std::unique_ptr<Segment>> segments_;
  std::size_t segment_count_[2] = {0, 0};
  std::size_t reserved_ = 0;
  std::size_t usable_ = 0;
  std::size_t free_bytes_ = 0;
  std::atomic<std::uint64_t> detach_epoch_{0};
};

}  // namespace hostrt::detail::pool
