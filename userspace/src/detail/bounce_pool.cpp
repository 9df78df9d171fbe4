#include "detail/bounce_pool.hpp"

#include <algorithm>

#include "detail/device_core.hpp"

namespace hostrt::detail {

void BouncePool::reclaim_locked() noexcept {
  auto done = [](const Pending& p) {
    auto s = p.stream.lock();
    return !s || s->reached(p.point);
  };
  for (auto& p : pending_)
    if (done(p)) free_.push_back(p.buf);
  std::erase_if(pending_, done);
  // Keep the largest few; the rest go back to the driver with the next release.
  std::sort(free_.begin(), free_.end(),
            [](const BoMapping& a, const BoMapping& b) { return a.size > b.size; });
}

BoMapping BouncePool::acquire(DeviceBackend& backend, std::size_t bytes) {
  {
    std::lock_guard lk(m_);
    reclaim_locked();
    // Smallest free buffer that fits, so a huge one is not spent on a small copy.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->size >= bytes && (best == free_.end() || it->size < best->size)) best = it;
    if (best != free_.end()) {
      BoMapping b = *best;
      free_.erase(best);
      return b;
    }
  }
  // The driver call happens outside the lock.
  return backend.create_bo(std::max(bytes, kMinSize));
}

void BouncePool::release_after(const BoMapping& buf, const std::shared_ptr<StreamCore>& stream,
                               std::uint64_t point) {
  std::lock_guard lk(m_);
  pending_.push_back({buf, stream, point});
}

void BouncePool::release(DeviceBackend& backend, const BoMapping& buf) noexcept {
  std::vector<BoMapping> excess;
  {
    std::lock_guard lk(m_);
    free_.push_back(buf);
    while (free_.size() > kMaxFree) {
      auto smallest = std::min_element(
          free_.begin(), free_.end(), [](const BoMapping& a, const BoMapping& b) { return a.size < b.size; });
      excess.push_back(*smallest);
      free_.erase(smallest);
    }
  }
  for (auto& b : excess) backend.release_bo(b);  // driver calls outside the lock
}

void BouncePool::clear(DeviceBackend& backend) noexcept {
  std::lock_guard lk(m_);
  for (auto& b : free_) backend.release_bo(b);
  for (auto& p : pending_) backend.release_bo(p.buf);
  free_.clear();
  pending_.clear();
}

}  // namespace hostrt::detail
