// Where segments come from: the device (host_alloc, a driver call) in production, plain
// aligned memory in deterministic tests. Calls into a source are slow and may block, so the
// pool never makes them while holding one of its locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hostrt::detail::pool {

// One piece of pinned memory; the destructor gives it back (never throws).
class SegmentMemory {
 public:
  virtual ~SegmentMemory() = default;
  virtual void* data() const noexcept = 0;
  virtual std::size_t size() const noexcept = 0;
};

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // At least `bytes` bytes, 64-byte aligned. Throws hostrt::OutOfMemory when refused.
  virtual std::unique_ptr<SegmentMemory> allocate(std::size_t bytes) = 0;
};

}  // namespace hostrt::detail::pool
