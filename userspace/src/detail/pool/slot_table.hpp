// SlotTable: one entry per 64-byte slot of a segment, so deallocate() finds a block from its
// pointer with one load and no lock. Beside each Block* it keeps the block's size in 64-byte
// units, in a parallel array: both loads issue together from the pointer alone, so the free
// path picks its thread-cache bin without a second, dependent load from the block (the warm
// allocate+free pair is bound by that chain of loads).
// The table is reserved with mmap(MAP_NORESERVE) and only the pages holding block starts are
// ever touched, so its real cost is a fraction of the segment's (10 bytes per block in the
// worst case of all-64-byte blocks).
// Beside it, a two-level bitmap of the slots that name a block (a bit per slot, and a bit per
// 64 of those saying "some are set") finds the block holding an interior pointer
// (start_at_or_before) without walking back over every slot of the block: pointer attributes
// and the copies that record a block's use ask that. The bitmap is written by store() and read
// by start_at_or_before() under the arena lock only; the lock-free readers use the table.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace hostrt::detail::pool {

struct Block;

// What one slot says: the block starting there and its size in 64-byte units when that fits
// 16 bits (blocks below 4 MiB), 0 otherwise. The size is as of the last store; only an
// Allocated block's size is stable, so only its holder's free may rely on `units`.
struct SlotEntry {
  Block* block;
  std::size_t units;
};

class SlotTable {
 public:
  SlotTable() noexcept = default;
  // Throws hostrt::OutOfMemory when the address space cannot be reserved.
  explicit SlotTable(std::size_t slots);
  SlotTable(SlotTable&& o) noexcept;
  SlotTable& operator=(SlotTable&& o) noexcept;
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;
  ~SlotTable();

  // Under the arena lock.
  void store(std::size_t slot, Block* b, std::size_t bytes) noexcept {
    const std::size_t units = bytes / kUnit <= kMaxUnits ? bytes / kUnit : 0;
    std::atomic_ref<std::uint16_t>(units_[slot])
        .store(static_cast<std::uint16_t>(units), std::memory_order_relaxed);
    std::atomic_ref<Block*>(blocks_[slot]).store(b, std::memory_order_release);
    mark(slot, b != nullptr);
  }
  std::size_t slots() const noexcept { return slots_; }

  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  // The last slot at or before `slot` that names a block, or kNone: the block whose bytes
  // include those of `slot` if any does. Under the arena lock. Reads one bitmap word, and at
  // worst one summary word per 4096 slots (256 KiB) before it.
  std::size_t start_at_or_before(std::size_t slot) const noexcept;

  // A reader's cached view of the table (the free path keeps one per thread).
  struct View {
    Block* const* blocks = nullptr;
    const std::uint16_t* units = nullptr;
  };
  View view() const noexcept { return {blocks_, units_}; }
  static SlotEntry load(View v, std::size_t slot) noexcept {
    Block* b = std::atomic_ref<Block*>(const_cast<Block*&>(v.blocks[slot])).load(std::memory_order_acquire);
    const std::uint16_t u = std::atomic_ref<std::uint16_t>(const_cast<std::uint16_t&>(v.units[slot]))
                                .load(std::memory_order_relaxed);
    return {b, u};
  }

 private:
  static constexpr std::size_t kUnit = 64, kMaxUnits = 0xFFFF;
  void release() noexcept;
  void mark(std::size_t slot, bool named) noexcept;

  Block** blocks_ = nullptr;
  std::uint16_t* units_ = nullptr;    // inside the same mapping, after blocks_
  std::uint64_t* starts_ = nullptr;   // a bit per slot: names a block (same mapping)
  std::uint64_t* summary_ = nullptr;  // a bit per word of starts_: nonzero (same mapping)
  std::size_t slots_ = 0;
  std::size_t mapped_bytes_ = 0;
};

}  // namespace hostrt::detail::pool
