#include "detail/registry.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include "hostrt/error.hpp"

namespace hostrt::detail {

namespace {
std::string hex(std::uintptr_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#zx", static_cast<std::size_t>(a));
  return buf;
}

// One answer of find() for [begin, end): an entry (without peers), or a gap (`none`).
// Trivially destructible, so the per-thread cache needs no exit handler.
struct Cached {
  std::uint64_t generation = 0;  // 0: empty
  std::uintptr_t begin = 0, end = 0;
  bool none = false;
  MemoryType type = MemoryType::Pinned;
  const DeviceCore* device = nullptr;
  std::size_t device_index = 0;
  Backend backend = Backend::Drm;
  std::uint32_t handle = 0;
  bool readonly = false;
};
constexpr std::size_t kCached = 4;
thread_local Cached t_cached[kCached];
thread_local std::size_t t_next = 0;
}  // namespace

void Registry::insert(const RegEntry& e) {
  std::unique_lock lk(m_);
  auto next = by_begin_.lower_bound(e.begin);
  if (next != by_begin_.end() && next->second.begin < e.end)
    throw AlreadyRegistered(EEXIST, "range [" + hex(e.begin) + ", " + hex(e.end) + ") overlaps " +
                                        to_string(next->second.type) + " memory at " +
                                        hex(next->second.begin));
  if (next != by_begin_.begin()) {
    const RegEntry& prev = std::prev(next)->second;
    if (prev.end > e.begin)
      throw AlreadyRegistered(EEXIST, "range [" + hex(e.begin) + ", " + hex(e.end) + ") overlaps " +
                                          to_string(prev.type) + " memory at " + hex(prev.begin));
  }
  by_begin_.emplace_hint(next, e.begin, e);
  generation_.fetch_add(1, std::memory_order_release);
}

void Registry::set_handle(std::uintptr_t begin, std::uint32_t handle) noexcept {
  std::unique_lock lk(m_);
  if (auto it = by_begin_.find(begin); it != by_begin_.end()) it->second.handle = handle;
  generation_.fetch_add(1, std::memory_order_release);
}

void Registry::erase(std::uintptr_t begin) noexcept {
  std::unique_lock lk(m_);
  by_begin_.erase(begin);
  generation_.fetch_add(1, std::memory_order_release);
}

std::optional<RegEntry> Registry::find(const void* p) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const std::uint64_t g = generation_.load(std::memory_order_acquire);
  for (const Cached& c : t_cached) {
    if (c.generation != g || a - c.begin >= c.end - c.begin) continue;
    if (c.none) return std::nullopt;
    RegEntry e;
    e.begin = c.begin;
    e.end = c.end;
    e.type = c.type;
    e.device = c.device;
    e.device_index = c.device_index;
    e.backend = c.backend;
    e.handle = c.handle;
    e.readonly = c.readonly;
    return e;
  }
  return find_locked(a);
}

std::optional<RegEntry> Registry::find_locked(std::uintptr_t a) const {
  std::shared_lock lk(m_);
  // Stable under the lock: a change bumps it under the exclusive lock.
  Cached c{generation_.load(std::memory_order_relaxed)};
  std::optional<RegEntry> found;
  auto it = by_begin_.upper_bound(a);
  c.end = it == by_begin_.end() ? UINTPTR_MAX : it->second.begin;  // a gap ends at the next range
  if (it != by_begin_.begin()) {
    --it;
    if (a < it->second.end) found = it->second;
    c.begin = found ? it->second.begin : it->second.end;
  }
  if (found && found->peers) return found;  // never kept (see the header)
  c.none = !found;
  if (found) {
    c.end = found->end;
    c.type = found->type;
    c.device = found->device;
    c.device_index = found->device_index;
    c.backend = found->backend;
    c.handle = found->handle;
    c.readonly = found->readonly;
  }
  t_cached[t_next] = c;
  t_next = (t_next + 1) % kCached;
  return found;
}

bool Registry::overlaps(std::uintptr_t begin, std::uintptr_t end, MemoryType type) const {
  std::shared_lock lk(m_);
  auto it = by_begin_.upper_bound(begin);
  if (it != by_begin_.begin()) --it;
  for (; it != by_begin_.end() && it->second.begin < end; ++it)
    if (it->second.end > begin && it->second.type == type) return true;
  return false;
}

Registry& registry() noexcept {
  static Registry* r = new Registry;  // never destroyed: see the header
  return *r;
}

}  // namespace hostrt::detail
