// Pinned staging buffers for copies from or to pageable memory. A buffer handed to a job
// comes back to the free list once its stream has reached the job's point (checked on the
// completion page when the next buffer is wanted), or at once when the stream is gone:
// the job's own BO reference keeps the memory valid for the device until it ends.
// Buffers are plain BOs (not in the pointer registry); the owning DeviceCore clears the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "detail/backend.hpp"

namespace hostrt::detail {

class StreamCore;

class BouncePool {
 public:
  static constexpr std::size_t kMinSize = 64 * 1024;
  static constexpr std::size_t kMaxFree = 8;

  BoMapping acquire(DeviceBackend& backend, std::size_t bytes);
  // Back to the pool once `stream` reaches `point`.
  void release_after(const BoMapping& buf, const std::shared_ptr<StreamCore>& stream, std::uint64_t point);
  void release(DeviceBackend& backend, const BoMapping& buf) noexcept;
  void clear(DeviceBackend& backend) noexcept;

 private:
  struct Pending {
    BoMapping buf;
    std::weak_ptr<StreamCore> stream;
    std::uint64_t point;
  };
  void reclaim_locked() noexcept;

  std::mutex m_;
  std::vector<BoMapping> free_;
  std::vector<Pending> pending_;
};

}  // namespace hostrt::detail
