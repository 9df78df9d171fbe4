#include "detail/pool/page_map.hpp"

namespace hostrt::detail::pool {

PageMap::~PageMap() {
  for (auto& l : root_) {
    Leaf* leaf = l.load(std::memory_order_relaxed);
    if (leaf == nullptr) continue;
    for (auto& c : leaf->children) delete c.load(std::memory_order_relaxed);
    delete leaf;
  }
}

bool PageMap::representable(std::uintptr_t base, std::size_t size) noexcept {
  const std::uintptr_t limit = std::uintptr_t{1} << (kPageShift + kBits1 + kBits2 + kBits3);
  return base < limit && size <= limit - base;
}

PageMap& PageMap::process() {
  static PageMap* m = new PageMap;
  return *m;
}

void PageMap::assign(std::uintptr_t base, std::size_t size, Segment* seg) {
  std::lock_guard lk(writer_);
  const std::uintptr_t first = base >> kPageShift;
  const std::uintptr_t last = (base + size) >> kPageShift;  // exclusive
  for (std::uintptr_t page = first; page < last; ++page) {
    auto& lslot = root_[page >> (kBits2 + kBits3)];
    Leaf* leaf = lslot.load(std::memory_order_relaxed);
    if (leaf == nullptr) {
      if (seg == nullptr) continue;
      leaf = new Leaf();
      lslot.store(leaf, std::memory_order_release);
    }
    auto& nslot = leaf->children[(page >> kBits3) & kMask2];
    Node3* n3 = nslot.load(std::memory_order_relaxed);
    if (n3 == nullptr) {
      if (seg == nullptr) continue;
      n3 = new Node3();
      nslot.store(n3, std::memory_order_release);
    }
    n3->entries[page & kMask3].store(seg, std::memory_order_release);
  }
}

}  // namespace hostrt::detail::pool
