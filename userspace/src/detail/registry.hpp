// The process-wide pointer registry: which host ranges are pinned (host_alloc) or
// registered (host_register), on which device and BO. An interval map keyed by start
// address; ranges never overlap, which is how double registration is refused.
//
// find() is on every copy's path (both ends of memcpy_async): each thread keeps its last few
// answers, the gaps between ranges (pageable memory) included, valid while the registry's
// generation (bumped by every change) has not moved. A hit is one load of the shared
// generation and no write to shared memory; only a miss takes the lock. Portable entries
// are never kept (their views hold other devices' imports).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>

#include "hostrt/types.hpp"

namespace hostrt::detail {

class DeviceCore;
class PeerViews;

struct RegEntry {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;  // exclusive
  MemoryType type = MemoryType::Pinned;
  const DeviceCore* device = nullptr;  // identity only, never dereferenced through here
  std::size_t device_index = 0;
  Backend backend = Backend::Drm;
  std::uint32_t handle = 0;
  bool readonly = false;
  // Portable memory: the other devices' handles (made on first use); null otherwise.
  std::shared_ptr<PeerViews> peers;
};

class Registry {
 public:
  // Throws AlreadyRegistered when [e.begin, e.end) overlaps a known range.
  void insert(const RegEntry& e);
  void set_handle(std::uintptr_t begin, std::uint32_t handle) noexcept;
  void erase(std::uintptr_t begin) noexcept;
  // Whether a range of this type overlaps [begin, end).
  bool overlaps(std::uintptr_t begin, std::uintptr_t end, MemoryType type) const;
  // The entry whose range contains p.
  std::optional<RegEntry> find(const void* p) const;

 private:
  std::optional<RegEntry> find_locked(std::uintptr_t a) const;

  mutable std::shared_mutex m_;
  std::map<std::uintptr_t, RegEntry> by_begin_;
  std::atomic<std::uint64_t> generation_{1};  // bumped under m_ by every change
};

// Lives until exit and beyond static destructors (buffers may be freed from them).
Registry& registry() noexcept;

}  // namespace hostrt::detail
