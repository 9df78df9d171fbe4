// The one door from the runtime's internals (and its white-box tests) into the public classes:
// their internal constructors and the internals they hold. The public headers name only this
// friend, so no detail:: type appears in their interface.
#pragma once

#include <memory>

#include "detail/pool/segment_source.hpp"
#include "hostrt/hostrt.hpp"
#include "hostrt/pool.hpp"

namespace hostrt::detail {

namespace pool {
class PoolCore;
class RegistrationIndex;
class SegmentSource;
}  // namespace pool

struct Access {
  static const std::shared_ptr<StreamCore>& core(const Stream& s) noexcept { return s.core_; }
  static const std::shared_ptr<DeviceCore>& core(const Device& d) noexcept { return d.core_; }
  static pool::PoolCore& core(const Pool& p) noexcept { return *p.core_; }
  static const std::shared_ptr<Allocation>& allocation(const PinnedBuffer& b) noexcept { return b.alloc_; }
  static pool::RegistrationIndex& index(const RegistrationCache& c) noexcept { return *c.index_; }
  static std::shared_ptr<const EventRecording> snapshot(const Event& e) { return e.snapshot(); }

  static Stream stream(std::shared_ptr<StreamCore> core) noexcept { return Stream(std::move(core)); }
  static Device device(std::shared_ptr<DeviceCore> core) noexcept { return Device(std::move(core)); }
  static PinnedBuffer pinned(std::shared_ptr<Allocation> a) noexcept { return PinnedBuffer(std::move(a)); }

  // The device whose host_alloc feeds the pool (nullptr for another source).
  static DeviceCore* device_core(const Pool& p) noexcept { return p.device_; }
  // Whether a stream of `device` may use the pool (its device, or one with access).
  static bool serves(const Pool& p, const std::shared_ptr<DeviceCore>& device) { return p.serves(device); }
  // A device's default pool, owned by the device's internals.
  static std::unique_ptr<Pool> default_pool(DeviceCore& device) {
    return std::unique_ptr<Pool>(new Pool(Pool::DefaultPoolTag{}, device));
  }
  // A pool over any segment source (tests, or memory pinned some other way).
  static std::unique_ptr<Pool> pool(std::unique_ptr<pool::SegmentSource> source, PoolOptions options) {
    return std::unique_ptr<Pool>(new Pool(std::move(source), options));
  }
};

// The live Pool that owns p (p in one of its segments), or nullptr: one page-map lookup.
Pool* find_pool(const void* p);
// The allocated pool block containing p (any byte of it): its start and the size its user
// asked for. False when p is in no allocated block of any pool.
struct PoolBlockInfo {
  void* base = nullptr;
  std::size_t size = 0;
};
bool describe_pool_block(const void* p, PoolBlockInfo& info);

}  // namespace hostrt::detail
