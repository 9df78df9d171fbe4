// PageMap: 4 KiB page -> Segment*, a three-level radix tree over the 47-bit user address
// space. Readers (deallocate's fast path, hrtFreeAsync's search for a pointer's pool) take no
// lock: interior nodes are created once and live as long as the map, and every entry is an
// atomic pointer. There is one map for the process (every pool's segments, each naming its
// pool), so that finding a pointer's pool is one lookup, not a scan of the pools; writers
// take the map's own lock.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

namespace hostrt::detail::pool {

struct Segment;

class PageMap {
 public:
  // The process's map. Never destroyed: pools may go in static destructors.
  static PageMap& process();

  PageMap() = default;
  PageMap(const PageMap&) = delete;
  PageMap& operator=(const PageMap&) = delete;
  ~PageMap();

  Segment* lookup(std::uintptr_t addr) const noexcept {
    const std::uintptr_t page = addr >> kPageShift;
    if (page >> (kBits2 + kBits3 + kBits1) != 0) return nullptr;
    const Leaf* leaf = root_[page >> (kBits2 + kBits3)].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    const Node3* n3 = leaf->children[(page >> kBits3) & kMask2].load(std::memory_order_acquire);
    if (n3 == nullptr) return nullptr;
    return n3->entries[page & kMask3].load(std::memory_order_acquire);
  }

  // Maps [base, base+size) (page aligned) to seg, or to nullptr to unmap. Throws std::bad_alloc.
  void assign(std::uintptr_t base, std::size_t size, Segment* seg);
  // Whether every page of the range can be represented (the 47-bit user address space).
  static bool representable(std::uintptr_t base, std::size_t size) noexcept;

 private:
  static constexpr unsigned kPageShift = 12;
  static constexpr unsigned kBits1 = 11, kBits2 = 12, kBits3 = 12;
  static constexpr std::uintptr_t kMask2 = (1u << kBits2) - 1, kMask3 = (1u << kBits3) - 1;

  struct Node3 {
    std::array<std::atomic<Segment*>, 1u << kBits3> entries{};
  };
  struct Leaf {
    std::array<std::atomic<Node3*>, 1u << kBits2> children{};
  };

  std::mutex writer_;
  std::array<std::atomic<Leaf*>, 1u << kBits1> root_{};
};

}  // namespace hostrt::detail::pool
