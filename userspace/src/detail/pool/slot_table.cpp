#include "detail/pool/slot_table.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <utility>

#include "detail/pool/align.hpp"
#include "hostrt/error.hpp"

namespace hostrt::detail::pool {

namespace {
constexpr std::size_t kBits = 64;
std::size_t words(std::size_t bits) noexcept { return (bits + kBits - 1) / kBits; }
// The bits of a word up to and including `bit`.
std::uint64_t up_to(std::size_t bit) noexcept { return ~std::uint64_t{0} >> (kBits - 1 - bit); }
std::size_t top(std::uint64_t w) noexcept { return kBits - 1 - static_cast<std::size_t>(__builtin_clzll(w)); }
}  // namespace

SlotTable::SlotTable(std::size_t slots) : slots_(slots) {
  const std::size_t block_bytes = round_up(slots * sizeof(Block*), kPageSize);
  const std::size_t unit_bytes = round_up(slots * sizeof(std::uint16_t), kPageSize);
  const std::size_t start_bytes = round_up(words(slots) * sizeof(std::uint64_t), kPageSize);
  const std::size_t summary_bytes = round_up(words(words(slots)) * sizeof(std::uint64_t), kPageSize);
  mapped_bytes_ = block_bytes + unit_bytes + start_bytes + summary_bytes;
  void* p = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw OutOfMemory(err,
                      "pool: reserving a slot table of " + std::to_string(mapped_bytes_) + " bytes failed");
  }
  auto* at = static_cast<char*>(p);
  blocks_ = reinterpret_cast<Block**>(at);
  units_ = reinterpret_cast<std::uint16_t*>(at + block_bytes);
  starts_ = reinterpret_cast<std::uint64_t*>(at + block_bytes + unit_bytes);
  summary_ = reinterpret_cast<std::uint64_t*>(at + block_bytes + unit_bytes + start_bytes);
}

void SlotTable::mark(std::size_t slot, bool named) noexcept {
  const std::size_t w = slot / kBits;
  const std::uint64_t bit = std::uint64_t{1} << (slot % kBits);
  const std::uint64_t sbit = std::uint64_t{1} << (w % kBits);
  if (named) {
    starts_[w] |= bit;
    summary_[w / kBits] |= sbit;
  } else if ((starts_[w] &= ~bit) == 0) {
    summary_[w / kBits] &= ~sbit;
  }
}

std::size_t SlotTable::start_at_or_before(std::size_t slot) const noexcept {
  if (slot >= slots_) return kNone;
  const std::size_t w = slot / kBits;
  if (const std::uint64_t m = starts_[w] & up_to(slot % kBits)) return w * kBits + top(m);
  // The nearest nonzero word before w, from the summary.
  if (w == 0) return kNone;
  std::size_t sw = (w - 1) / kBits;
  std::uint64_t m = summary_[sw] & up_to((w - 1) % kBits);
  while (m == 0) {
    if (sw == 0) return kNone;
    m = summary_[--sw];
  }
  const std::size_t word = sw * kBits + top(m);
  return word * kBits + top(starts_[word]);
}

SlotTable::SlotTable(SlotTable&& o) noexcept
    : blocks_(std::exchange(o.blocks_, nullptr)),
      units_(std::exchange(o.units_, nullptr)),
      starts_(std::exchange(o.starts_, nullptr)),
      summary_(std::exchange(o.summary_, nullptr)),
      slots_(std::exchange(o.slots_, 0)),
      mapped_bytes_(std::exchange(o.mapped_bytes_, 0)) {}

SlotTable& SlotTable::operator=(SlotTable&& o) noexcept {
  if (this != &o) {
    release();
    blocks_ = std::exchange(o.blocks_, nullptr);
    units_ = std::exchange(o.units_, nullptr);
    starts_ = std::exchange(o.starts_, nullptr);
    summary_ = std::exchange(o.summary_, nullptr);
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
  starts_ = nullptr;
  summary_ = nullptr;
}

}  // namespace hostrt::detail::pool
