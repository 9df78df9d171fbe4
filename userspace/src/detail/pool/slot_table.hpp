// SlotTable: one Block* per 64-byte slot of a segment, so deallocate() finds a block from its
// pointer with one load and no lock. The table is reserved with mmap(MAP_NORESERVE) and only
// the pages holding block starts are ever touched, so its real cost is a fraction of the
// segment's (8 bytes per block in the worst case of all-64-byte blocks).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hostrt::detail::pool {

struct Block;

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

  Block* load(std::size_t slot) const noexcept {
    return std::atomic_ref<Block*>(table_[slot]).load(std::memory_order_acquire);
  }
  void store(std::size_t slot, Block* b) noexcept {
    std::atomic_ref<Block*>(table_[slot]).store(b, std::memory_order_release);
  }
  std::size_t slots() const noexcept { return slots_; }
  // The raw table, for a reader that caches it (entries are read through std::atomic_ref).
  Block* const* data() const noexcept { return table_; }
  static Block* load(Block* const* table, std::size_t slot) noexcept {
    return std::atomic_ref<Block*>(const_cast<Block*&>(table[slot])).load(std::memory_order_acquire);
  }

 private:
  void release() noexcept;

  Block** table_ = nullptr;
  std::size_t slots_ = 0;
  std::size_t mapped_bytes_ = 0;
};

}  // namespace hostrt::detail::pool
