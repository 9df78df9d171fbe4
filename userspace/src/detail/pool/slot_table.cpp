#include "detail/pool/slot_table.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <utility>

#include "detail/pool/align.hpp"
#include "hostrt/error.hpp"

namespace hostrt::detail::pool {

SlotTable::SlotTable(std::size_t slots) : slots_(slots) {
  const std::size_t block_bytes = round_up(slots * sizeof(Block*), kPageSize);
  mapped_bytes_ = block_bytes + round_up(slots * sizeof(std::uint16_t), kPageSize);
  void* p = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw OutOfMemory(err,
                      "pool: reserving a slot table of " + std::to_string(mapped_bytes_) + " bytes failed");
  }
  blocks_ = static_cast<Block**>(p);
  units_ = reinterpret_cast<std::uint16_t*>(static_cast<char*>(p) + block_bytes);
}

SlotTable::SlotTable(SlotTable&& o) noexcept
    : blocks_(std::exchange(o.blocks_, nullptr)),
      units_(std::exchange(o.units_, nullptr)),
      slots_(std::exchange(o.slots_, 0)),
      mapped_bytes_(std::exchange(o.mapped_bytes_, 0)) {}

SlotTable& SlotTable::operator=(SlotTable&& o) noexcept {
  if (this != &o) {
    release();
    blocks_ = std::exchange(o.blocks_, nullptr);
    units_ = std::exchange(o.units_, nullptr);
    slots_ = std::exchange(o.slots_, 0);
    mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
  }
  return *this;
}

SlotTable::~SlotTable() { release(); }

void SlotTable::release() noexcept {
  if (blocks_ != nullptr) munmap(blocks_, mapped_bytes_);
  blocks_ = nullptr;
  units_ = nullptr;
}

}  // namespace hostrt::detail::pool
