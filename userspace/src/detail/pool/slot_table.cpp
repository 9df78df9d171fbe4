#include "detail/pool/slot_table.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <utility>

#include "detail/pool/align.hpp"
#include "hostrt/error.hpp"

namespace hostrt::detail::pool {

SlotTable::SlotTable(std::size_t slots) : slots_(slots) {
  mapped_bytes_ = round_up(slots * sizeof(Block*), kPageSize);
  void* p = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw OutOfMemory(err,
                      "pool: reserving a slot table of " + std::to_string(mapped_bytes_) + " bytes failed");
  }
  table_ = static_cast<Block**>(p);
}

SlotTable::SlotTable(SlotTable&& o) noexcept
    : table_(std::exchange(o.table_, nullptr)),
      slots_(std::exchange(o.slots_, 0)),
      mapped_bytes_(std::exchange(o.mapped_bytes_, 0)) {}

SlotTable& SlotTable::operator=(SlotTable&& o) noexcept {
  if (this != &o) {
    release();
    table_ = std::exchange(o.table_, nullptr);
    slots_ = std::exchange(o.slots_, 0);
    mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
  }
  return *this;
}

SlotTable::~SlotTable() { release(); }

void SlotTable::release() noexcept {
  if (table_ != nullptr) munmap(table_, mapped_bytes_);
  table_ = nullptr;
}

}  // namespace hostrt::detail::pool
