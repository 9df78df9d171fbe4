// Size and address rounding for the whole runtime (the pool, the backends, registrations):
// one definition instead of one per file.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace hostrt::detail {

// Up to a multiple of a (any a > 0); the caller keeps n + a from overflowing.
constexpr std::size_t round_up(std::size_t n, std::size_t a) noexcept { return (n + a - 1) / a * a; }
// Addresses, for a power-of-two a.
constexpr std::uintptr_t align_up(std::uintptr_t p, std::size_t a) noexcept { return (p + a - 1) & ~(a - 1); }
constexpr std::uintptr_t align_down(std::uintptr_t p, std::size_t a) noexcept { return p & ~(a - 1); }

// The host's page size, read once.
inline std::size_t page_size() noexcept {
  static const std::size_t ps = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return ps;
}

}  // namespace hostrt::detail
