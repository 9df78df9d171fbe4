#include "detail/c_handles.hpp"

#include "detail/c_api_support.hpp"

namespace hostrt::detail::capi {

std::uint64_t HandleRegistry::add_raw(HandleKind k, void* obj) {
  std::lock_guard lk(m_);
  const bool reused = !free_.empty();
  std::uint32_t index;
  if (reused) {
    index = free_.back();
  } else {
    expect(next_ < kMaxHandles, hrtErrorMemoryAllocation,
           "too many live handles (streams, events, pools and caches together)");
    index = next_;
    auto& chunk = chunks_[index / kChunkSlots];
    if (chunk.load(std::memory_order_relaxed) == nullptr) chunk.store(new Chunk, std::memory_order_release);
  }
  // Reserve the free list's room for this slot's return now, so remove() never allocates.
  free_.reserve(std::size_t{next_} + 1);
  Slot& s = slot(index);
  // A new slot starts at generation 1; a reused one keeps the generation its removal set.
  std::uint64_t gen = s.word.load(std::memory_order_relaxed) >> 32;
  if (gen == 0) gen = 1;
  s.obj.store(obj, std::memory_order_relaxed);
  const std::uint64_t w = (gen << 32) | (static_cast<std::uint64_t>(k) << 1) | 1;
  s.word.store(w, std::memory_order_release);
  if (reused)
    free_.pop_back();
  else
    ++next_;
  return handle_of(index, w);
}

void* HandleRegistry::remove_raw(HandleKind k, std::uintptr_t h) noexcept {
  std::lock_guard lk(m_);
  Slot* s = live_slot(k, h);
  if (s == nullptr) return nullptr;
  const std::uint64_t w = s->word.load(std::memory_order_relaxed);
  // The next generation; 0 is skipped so that a wrapped slot never matches an old handle of
  // generation 0 (there are none: generations start at 1).
  std::uint64_t gen = (w >> 32) + 1;
  if ((gen & 0xFFFFFFFF) == 0) gen = 1;
  s->word.store((gen & 0xFFFFFFFF) << 32, std::memory_order_release);
  void* obj = s->obj.exchange(nullptr, std::memory_order_relaxed);
  free_.push_back(static_cast<std::uint32_t>((h >> 4) & 0xFFFFFFF));  // room reserved by add
  return obj;
}

}  // namespace hostrt::detail::capi
