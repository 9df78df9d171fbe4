// Size and address arithmetic shared by the pool's parts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "detail/size_math.hpp"

namespace hostrt::detail::pool {

inline constexpr std::size_t kAlignment = 64;         // every block start and size
inline constexpr std::size_t kPageSize = 4096;        // segment bookkeeping granularity
inline constexpr std::size_t kSmallLimit = 1u << 20;  // rounded sizes up to this are "small"
inline constexpr std::size_t kSmallSegmentMax = 32u << 20;
inline constexpr std::size_t kLargeSegmentMax = 256u << 20;  // shared large segments only
// Segment sizes past the minimum grow in these steps: fine enough that the last, partly used
// segment stays near a sixteenth of the pool.
inline constexpr std::size_t kSegmentGranule = 64u << 10;
// A dedicated segment serves a request of `rounded` bytes when it is at most rounded/8 larger.
inline constexpr std::size_t kDedicatedSlackDivisor = 8;
// Small segments more than 1/16 free mean a miss is fragmentation: grow by min_segment/16.
inline constexpr std::size_t kFragmentedDivisor = 16;
// Far below SIZE_MAX so that rounding and segment arithmetic cannot overflow.
inline constexpr std::size_t kMaxRequest = std::size_t{1} << 46;

using detail::align_down;
using detail::align_up;
using detail::round_up;

// The pool's rounding: to 64 bytes and no further (0 bytes still gets its own 64).
constexpr std::size_t block_size_for(std::size_t n) noexcept {
  return n == 0 ? kAlignment : round_up(n, kAlignment);
}

enum class SizeClass : std::uint8_t { Small = 0, Large = 1 };

constexpr SizeClass size_class_of(std::size_t rounded) noexcept {
  return rounded <= kSmallLimit ? SizeClass::Small : SizeClass::Large;
}

}  // namespace hostrt::detail::pool
