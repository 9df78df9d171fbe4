// The C API's one handle registry: every hrtStream_t, hrtEvent_t, hrtPool_t and
// hrtRegCache_t a caller holds is a slot index, a generation and a kind packed into the
// pointer-sized handle value, never the address of the object. Looking a handle up is a few
// loads and no lock, so handles may be used from any number of threads at once; a destroyed,
// reused, foreign or made-up handle is refused (hrtErrorInvalidResourceHandle) instead of
// being dereferenced, because the slots themselves are never freed.
//
// What stays the caller's to order, as in CUDA: destroying a handle while another thread is
// still inside a call that uses it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "hostrt/hostrt.h"
#include "hostrt/hostrt_pool.h"

namespace hostrt::detail::capi {

enum class HandleKind : std::uint8_t { Stream = 1, Event = 2, Pool = 3, RegCache = 4 };

// The kind of C object behind each handle type.
template <class T>
constexpr HandleKind handle_kind() noexcept {
  if constexpr (std::is_same_v<T, hrtStream>)
    return HandleKind::Stream;
  else if constexpr (std::is_same_v<T, hrtEvent>)
    return HandleKind::Event;
  else if constexpr (std::is_same_v<T, hrtPool>)
    return HandleKind::Pool;
  else if constexpr (std::is_same_v<T, hrtRegCache>)
    return HandleKind::RegCache;
  else
    static_assert(!std::is_same_v<T, T>, "not a C handle type");
}

class HandleRegistry {
 public:
  // Never destroyed: handles may be used from static destructors.
  static HandleRegistry& instance() {
    static HandleRegistry* r = new HandleRegistry;
    return *r;
  }

  // Takes obj and returns its handle. Throws std::bad_alloc, or CError
  // (hrtErrorMemoryAllocation) once kMaxHandles are live.
  template <class T>
  T* add(std::unique_ptr<T> obj) {
    const std::uint64_t h = add_raw(handle_kind<T>(), obj.get());
    obj.release();
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(h));
  }

  // The object behind a live handle of kind T, or nullptr. No lock.
  template <class T>
  T* find(const T* handle) const noexcept {
    return static_cast<T*>(find_raw(handle_kind<T>(), reinterpret_cast<std::uintptr_t>(handle)));
  }

  // Ends the handle and hands its object back; nullptr if it was not live (destroyed twice,
  // made up, or of another kind). Exactly one of two racing removals gets the object.
  template <class T>
  std::unique_ptr<T> remove(T* handle) noexcept {
    return std::unique_ptr<T>(
        static_cast<T*>(remove_raw(handle_kind<T>(), reinterpret_cast<std::uintptr_t>(handle))));
  }

  // The handle of the first live object of kind T for which pred holds, or nullptr. Objects
  // cannot be removed meanwhile (removal takes the same lock); pred must not call back in.
  template <class T, class Pred>
  T* find_if(Pred&& pred) const {
    std::lock_guard lk(m_);
    for (std::uint32_t i = 0; i < next_; ++i) {
      const Slot& s = slot(i);
      const std::uint64_t w = s.word.load(std::memory_order_acquire);
      if (!live(w) || kind(w) != handle_kind<T>()) continue;
      auto* obj = static_cast<T*>(s.obj.load(std::memory_order_relaxed));
      if (pred(*obj)) return reinterpret_cast<T*>(static_cast<std::uintptr_t>(handle_of(i, w)));
    }
    return nullptr;
  }

  static constexpr std::size_t kChunkSlots = 4096, kChunks = 1024;
  static constexpr std::size_t kMaxHandles = kChunkSlots * kChunks;

 private:
  // A slot's word: generation (32 bits) << 32 | kind << 1 | live. The handle value carries the
  // same generation and kind with the index instead of the live bit: gen << 32 | index << 4 |
  // kind (never 0: kind is at least 1).
  struct Slot {
    std::atomic<std::uint64_t> word{0};
    std::atomic<void*> obj{nullptr};
  };
  using Chunk = std::array<Slot, kChunkSlots>;

  static bool live(std::uint64_t w) noexcept { return (w & 1) != 0; }
  static HandleKind kind(std::uint64_t w) noexcept { return static_cast<HandleKind>((w >> 1) & 0xF); }
  static std::uint64_t handle_of(std::uint32_t index, std::uint64_t w) noexcept {
    return (w & ~std::uint64_t{0xFFFFFFFF}) | (std::uint64_t{index} << 4) |
           static_cast<std::uint64_t>(kind(w));
  }

  Slot& slot(std::uint32_t i) const noexcept {
    return (*chunks_[i / kChunkSlots].load(std::memory_order_acquire))[i % kChunkSlots];
  }
  // The slot a handle value names when its kind, index and generation are those of a live
  // object; nullptr otherwise.
  Slot* live_slot(HandleKind k, std::uintptr_t h) const noexcept;

  std::uint64_t add_raw(HandleKind k, void* obj);
  void* find_raw(HandleKind k, std::uintptr_t h) const noexcept {
    const Slot* s = live_slot(k, h);
    return s != nullptr ? s->obj.load(std::memory_order_relaxed) : nullptr;
  }
  void* remove_raw(HandleKind k, std::uintptr_t h) noexcept;

  mutable std::mutex m_;  // adds, removals, scans; never lookups
  std::array<std::atomic<Chunk*>, kChunks> chunks_{};
  std::uint32_t next_ = 0;           // slots ever used
  std::vector<std::uint32_t> free_;  // ended slots, reused with their next generation
};

inline HandleRegistry::Slot* HandleRegistry::live_slot(HandleKind k, std::uintptr_t h) const noexcept {
  if ((h & 0xF) != static_cast<std::uintptr_t>(k)) return nullptr;
  const std::size_t index = (h >> 4) & 0xFFFFFFF;
  if (index >= kMaxHandles) return nullptr;
  Chunk* c = chunks_[index / kChunkSlots].load(std::memory_order_acquire);
  if (c == nullptr) return nullptr;
  Slot& s = (*c)[index % kChunkSlots];
  const std::uint64_t want =
      (static_cast<std::uint64_t>(h) & ~std::uint64_t{0xFFFFFFFF}) | (static_cast<std::uint64_t>(k) << 1) | 1;
  return s.word.load(std::memory_order_acquire) == want ? &s : nullptr;
}

}  // namespace hostrt::detail::capi
