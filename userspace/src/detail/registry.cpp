#include "detail/registry.hpp"

#include <cerrno>
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
}

void Registry::set_handle(std::uintptr_t begin, std::uint32_t handle) noexcept {
  std::unique_lock lk(m_);
  if (auto it = by_begin_.find(begin); it != by_begin_.end()) it->second.handle = handle;
}

void Registry::erase(std::uintptr_t begin) noexcept {
  std::unique_lock lk(m_);
  by_begin_.erase(begin);
}

std::optional<RegEntry> Registry::find(const void* p) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::shared_lock lk(m_);
  auto it = by_begin_.upper_bound(a);
  if (it == by_begin_.begin()) return std::nullopt;
  --it;
  if (a >= it->second.end) return std::nullopt;
  return it->second;
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
