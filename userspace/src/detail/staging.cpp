#include "detail/staging.hpp"

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

#include "detail/device_core.hpp"
#include "detail/pool/pool_core.hpp"
#include "detail/pool/stream_core_ref.hpp"
#include "hostrt/error.hpp"

namespace hostrt::detail {

// The BOs behind the staging pool's segments (at most a few: the pool is capped at the ring).
struct StagingSegments {
  std::mutex m;
  std::vector<BoMapping> bos;

  Staging::Chunk find(void* p) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lk(m);
    for (const BoMapping& bo : bos) {
      const auto base = reinterpret_cast<std::uintptr_t>(bo.ptr);
      if (a >= base && a < base + bo.size) return {p, bo.handle, a - base, {}};
    }
    throw SystemError(EFAULT, "staging: chunk outside the staging segments");
  }
};

namespace {

class StagingSegment final : public pool::SegmentMemory {
 public:
  StagingSegment(DeviceCore& dev, BoMapping bo, std::shared_ptr<StagingSegments> segments) noexcept
      : dev_(dev), bo_(bo), segments_(std::move(segments)) {}
  ~StagingSegment() override;
  void* data() const noexcept override { return bo_.ptr; }
  std::size_t size() const noexcept override { return bo_.size; }

 private:
  DeviceCore& dev_;
  BoMapping bo_;
  std::shared_ptr<StagingSegments> segments_;
};

class StagingSource final : public pool::SegmentSource {
 public:
  StagingSource(DeviceCore& dev, std::shared_ptr<StagingSegments> segments)
      : dev_(dev), segments_(std::move(segments)) {}
  std::unique_ptr<pool::SegmentMemory> allocate(std::size_t bytes) override;

 private:
  DeviceCore& dev_;
  std::shared_ptr<StagingSegments> segments_;
};

}  // namespace

StagingSegment::~StagingSegment() {
  StagingSegments& segs = *segments_;
  {
    std::lock_guard lk(segs.m);
    std::erase_if(segs.bos, [&](const BoMapping& b) { return b.handle == bo_.handle; });
  }
  // A job still using it holds its own reference.
  if (DeviceBackend* be = dev_.backend_for_release()) be->release_bo(bo_);
}

std::unique_ptr<pool::SegmentMemory> StagingSource::allocate(std::size_t bytes) {
  BoMapping bo = dev_.backend("staging").create_bo(bytes);
  StagingSegments& segs = *segments_;
  try {
    {
      std::lock_guard lk(segs.m);
      segs.bos.push_back(bo);
    }
    return std::make_unique<StagingSegment>(dev_, bo, segments_);
  } catch (...) {
    {
      std::lock_guard lk(segs.m);
      std::erase_if(segs.bos, [&](const BoMapping& b) { return b.handle == bo.handle; });
    }
    if (DeviceBackend* be = dev_.backend_for_release()) be->release_bo(bo);
    throw;
  }
}

Staging::Staging(StreamCore& stream) : stream_(stream), segments_(std::make_shared<StagingSegments>()) {
  PoolOptions o;
  o.max_bytes = kRingBytes;
  o.min_segment_bytes = kRingBytes;
  o.thread_cache_bytes = 0;
  pool_ = pool::PoolCore::create(std::make_unique<StagingSource>(*stream.device(), segments_), o);
  pool_->abandon_pending_on_destroy();
}

Staging::~Staging() = default;

Staging::Chunk Staging::acquire(std::size_t bytes) {
  if (bytes == 0 || bytes > kChunkBytes)
    throw InvalidArgument(EINVAL, "staging: chunk of " + std::to_string(bytes) + " bytes");
  void* p = nullptr;
  try {
    p = pool_->allocate(bytes, pool::owned_stream_ref(stream_));
  } catch (const PoolOutOfMemory&) {
    // Every chunk is held by a copy in progress (nothing is pending: the pool would have
    // waited for that). Waiting for one could deadlock copies that hold one chunk and want a
    // second (pageable to pageable); pin one for this copy instead.
    BoMapping bo = stream_.device()->backend("staging").create_bo(bytes);
    return {bo.ptr, bo.handle, 0, bo};
  }
  try {
    return segments_->find(p);
  } catch (...) {
    pool_->deallocate(p, {});
    throw;
  }
}

void Staging::release(const Chunk& c) {
  if (c.own.handle != 0) {
    // A job still using it holds its own reference on the BO.
    if (DeviceBackend* be = stream_.device()->backend_for_release()) be->release_bo(c.own);
    return;
  }
  pool_->deallocate(c.ptr, pool::owned_stream_ref(stream_));
}

}  // namespace hostrt::detail
