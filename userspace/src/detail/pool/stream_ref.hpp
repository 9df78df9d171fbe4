// StreamRef: the pool's view of a stream, type-erased so the allocator core can be driven by
// hostrt::Stream in production and by a scripted fake in tests, without a virtual base class
// in the runtime's public Stream.
#pragma once

#include <cstdint>

namespace hostrt::detail::pool {

struct StreamOps {
  std::uint64_t (*last_submitted)(const void* stream) noexcept;
  // Must not make a syscall: the pool calls it while holding its arena lock.
  bool (*reached)(const void* stream, std::uint64_t point) noexcept;
  // May block and may throw (a device fault); never called under a pool lock.
  void (*wait_point)(void* stream, std::uint64_t point);
};

// A non-owning reference; `key` identifies the stream for the per-stream pending queues
// (hostrt::Stream::id(), stable for the stream's life, unlike its address).
struct StreamRef {
  void* stream = nullptr;
  std::uint64_t key = 0;
  const StreamOps* ops = nullptr;

  explicit operator bool() const noexcept { return stream != nullptr; }
  std::uint64_t last_submitted() const noexcept { return ops->last_submitted(stream); }
  bool reached(std::uint64_t point) const noexcept { return point == 0 || ops->reached(stream, point); }
  void wait_point(std::uint64_t point) const { ops->wait_point(stream, point); }
};

// A device point the host must see completed before a block may be handed out again.
struct StreamPoint {
  StreamRef stream;
  std::uint64_t point = 0;
};

}  // namespace hostrt::detail::pool
