#include "detail/pool/arena.hpp"

#include <algorithm>

namespace hostrt::detail::pool {

std::unique_ptr<Segment> make_segment(std::unique_ptr<SegmentMemory> memory, SizeClass cls, bool dedicated) {
  auto seg = std::make_unique<Segment>();
  const auto raw = reinterpret_cast<std::uintptr_t>(memory->data());
  // The page map works in whole pages; memory that is not page aligned (an emulated backend
  // may hand out 64-byte aligned memory) loses its partial first and last pages.
  const std::uintptr_t base = align_up(raw, kPageSize);
  const std::uintptr_t end = align_down(raw + memory->size(), kPageSize);
  seg->reserved = memory->size();
  seg->base = base;
  seg->size = end > base ? end - base : 0;
  seg->cls = cls;
  seg->dedicated = dedicated;
  seg->memory = std::move(memory);
  if (seg->size > 0) seg->slots = SlotTable(seg->size / kAlignment);
  return seg;
}

Arena::~Arena() {
  for (auto& s : segments_) {
    map_.assign(s->base, s->size, nullptr);  // the map outlives this pool; clearing cannot throw
    for (Block* b = s->first; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

void Arena::set_slot(Block* b, Block* value) noexcept {
  b->segment->slots.store((b->addr - b->segment->base) / kAlignment, value, b->size);
}

void Arena::add_free(Segment* s, std::size_t bytes) noexcept {
  s->free_bytes += bytes;
  class_free_[static_cast<int>(s->cls)] += bytes;
}

void Arena::sub_free(Segment* s, std::size_t bytes) noexcept {
  s->free_bytes -= bytes;
  class_free_[static_cast<int>(s->cls)] -= bytes;
}

Block* Arena::fit_in(std::size_t rounded, SizeClass cls) {
  FreeIndex& idx = free_[static_cast<int>(cls)];
  const std::pair<std::size_t, std::uintptr_t> key{rounded, 0};
  auto it = idx.lower_bound(key);
  if (cls == SizeClass::Large) {
    // A dedicated segment is never split: its block takes `rounded` bytes and the tail stays
    // free but unindexed (counted in free_bytes) until the block comes back whole.
    auto d = dedicated_.lower_bound(key);
    if (d != dedicated_.end() && (*d)->size - rounded <= rounded / kDedicatedSlackDivisor &&
        (it == idx.end() || (*d)->size <= (*it)->size)) {
      Block* b = *d;
      b->node = dedicated_.extract(d);
      b->size = rounded;
      set_slot(b, b);
      sub_free(b->segment, rounded);
      return b;
    }
  }
  if (it == idx.end()) return nullptr;
  return take(idx, it, rounded);
}

Block* Arena::fit_after(const Block* b, std::size_t rounded) {
  Block* n = b->next;
  if (n == nullptr || n->load_state() != BlockState::Free || n->size < rounded || n->segment->dedicated)
    return nullptr;
  FreeIndex& idx = index(n->segment);
  const auto it = idx.find(n);
  return it == idx.end() ? nullptr : take(idx, it, rounded);  // a free block is always indexed
}

Block* Arena::take(FreeIndex& idx, FreeIndex::iterator it, std::size_t rounded) {
  Block* b = *it;
  if (b->size > rounded) {
    // The remainder goes into the index first: the only step that can fail (bad_alloc for
    // the new block or its tree node), and it fails before anything has changed.
    auto rest = std::make_unique<Block>();
    rest->addr = b->addr + rounded;
    rest->size = b->size - rounded;
    rest->segment = b->segment;
    idx.insert(rest.get());
    Block* r = rest.release();
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    set_slot(r, r);
  }
  b->node = idx.extract(it);  // keeps the tree node for the block's return (see FreeIndex)
  b->size = rounded;
  set_slot(b, b);  // the size it is handed out with: what its free reads from the slot
  sub_free(b->segment, b->size);
  return b;
}

void Arena::free(Block* b) noexcept {
  Segment* s = b->segment;
  FreeIndex& idx = index(s);
  add_free(s, b->size);
  b->set_state(BlockState::Free);
  b->requested = 0;
  if (Block* p = b->prev; p != nullptr && p->load_state() == BlockState::Free) {
    p->node = idx.extract(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != nullptr) b->next->prev = p;
    set_slot(b, nullptr);
    delete b;
    b = p;
  }
  if (Block* n = b->next; n != nullptr && n->load_state() == BlockState::Free) {
    idx.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != nullptr) n->next->prev = b;
    set_slot(n, nullptr);
    delete n;
  }
  if (s->dedicated) {
    b->size = s->size;  // whole again, tail included
    set_slot(b, b);
  }
  // Every block outside the index holds its node, so this allocates nothing.
  idx.insert(std::move(b->node));
}

void Arena::add_segment(std::unique_ptr<Segment> seg) {
  auto b = std::make_unique<Block>();
  b->addr = seg->base;
  b->size = seg->size;
  b->segment = seg.get();
  Segment* s = seg.get();
  segments_.reserve(segments_.size() + 1);
  // Everything that can fail comes first, each undone if a later one fails.
  try {
    map_.assign(s->base, s->size, s);
    index(s).insert(b.get());
  } catch (...) {
    map_.assign(s->base, s->size, nullptr);  // only clears existing leaves: cannot throw
    throw;
  }
  segments_.push_back(std::move(seg));
  s->first = b.get();
  s->free_bytes = 0;
  add_free(s, s->size);
  set_slot(b.get(), b.get());
  b.release();
  ++segment_count_[static_cast<int>(s->cls)];
  class_reserved_[static_cast<int>(s->cls)] += s->reserved;
  usable_ += s->size;
}

Arena::Growth Arena::next_segment(std::size_t rounded, std::size_t min_segment,
                                  bool shared_large) const noexcept {
  const SizeClass c = size_class_of(rounded);
  if (c == SizeClass::Large && !shared_large) return {round_up(rounded, kPageSize), true};
  const std::size_t cap = c == SizeClass::Small ? kSmallSegmentMax : kLargeSegmentMax;
  std::size_t step = round_up(reserved() / 16, kSegmentGranule);
  step = std::min(std::max(step, min_segment), std::max(cap, min_segment));
  // Enough free already, only in pieces too small: the step would mostly add free space.
  if (free_bytes(c) > reserved(c) / kFragmentedDivisor)
    step = c == SizeClass::Small ? min_segment / kFragmentedDivisor : 0;
  return {round_up(std::max(step, rounded), kPageSize), false};
}

std::unique_ptr<Segment> Arena::detach(Segment* s) noexcept {
  auto it = std::find_if(segments_.begin(), segments_.end(), [s](const auto& p) { return p.get() == s; });
  std::unique_ptr<Segment> out = std::move(*it);
  segments_.erase(it);
  detach_epoch_.fetch_add(1, std::memory_order_release);
  Block* b = s->first;
  index(s).erase(b);
  s->slots.store(0, nullptr, 0);
  delete b;
  s->first = nullptr;
  // Unmapping only clears existing leaves, which never allocates.
  map_.assign(s->base, s->size, nullptr);
  --segment_count_[static_cast<int>(s->cls)];
  class_reserved_[static_cast<int>(s->cls)] -= s->reserved;
  usable_ -= s->size;
  sub_free(s, s->size);
  return out;
}

bool Arena::has_idle() const noexcept {
  return std::any_of(segments_.begin(), segments_.end(), [](const auto& s) { return s->idle(); });
}

std::vector<Segment*> Arena::idle_largest_first(const SizeClass* only) const {
  std::vector<Segment*> idle;
  for (const auto& s : segments_)
    if (s->idle() && (only == nullptr || s->cls == *only)) idle.push_back(s.get());
  std::sort(idle.begin(), idle.end(),
            [](const Segment* a, const Segment* b) { return a->reserved > b->reserved; });
  return idle;
}

std::vector<std::unique_ptr<Segment>> Arena::take_idle(std::size_t keep_bytes, const SizeClass* only) {
  std::vector<std::unique_ptr<Segment>> out;
  for (Segment* s : idle_largest_first(only)) {
    const std::size_t r = reserved();
    if (r < keep_bytes || r - keep_bytes < s->reserved) continue;
    out.push_back(detach(s));
  }
  return out;
}

std::vector<std::unique_ptr<Segment>> Arena::take_idle_down_to(std::size_t target) {
  std::vector<std::unique_ptr<Segment>> out;
  for (Segment* s : idle_largest_first()) {
    if (reserved() <= target) break;
    out.push_back(detach(s));
  }
  return out;
}

}  // namespace hostrt::detail::pool
