// Portable memory (cudaHostAllocPortable / cudaHostRegisterPortable): one buffer, usable by
// every device. The owning device made the BO; each other device (each other Device::open:
// every open file has its own GEM handles) gets its own handle to the same pages the first
// time a copy on one of its streams names the buffer:
//  - host_alloc memory is exported once as a dma-buf and imported by the other device
//    (PRIME: the kernel maps the same pages for that device, with its own IOVAs);
//  - registered memory is registered again on the other device (a read-only registration
//    cannot be exported, and each device then pins the range itself).
// Views are made lazily so that devices opened after the allocation can use it too, and so
// that memory never used elsewhere costs nothing. They are released with the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "detail/backend.hpp"
#include "hostrt/types.hpp"

namespace hostrt::detail {

class DeviceCore;

// The devices besides the owner that may use a pool's memory (cudaMemPoolSetAccess). Shared by
// the pool and the portable views of its segments, so that a grant or a revocation applies to
// memory already handed out.
class AccessList {
 public:
  void set(const std::shared_ptr<DeviceCore>& dev, bool allowed);
  bool allows(const std::shared_ptr<DeviceCore>& dev) const;
  bool empty() const;

 private:
  mutable std::mutex m_;
  std::vector<std::weak_ptr<DeviceCore>> devices_;
};

class PeerViews {
 public:
  // owner: the device whose BO `owner_handle` is; uapi_flags: the registration's (readonly).
  // access: when set, only the devices it allows get views (pool segments); null: every device.
  PeerViews(const std::shared_ptr<DeviceCore>& owner, MemoryType type, void* ptr, std::size_t size,
            std::uint32_t uapi_flags, std::shared_ptr<const AccessList> access = nullptr) noexcept;
  PeerViews(const PeerViews&) = delete;
  PeerViews& operator=(const PeerViews&) = delete;
  ~PeerViews();

  void set_owner_handle(std::uint32_t handle) noexcept;
  // The buffer's GEM handle on `dev`'s file, made on first use. InvalidArgument once the
  // buffer is freed; WrongDevice when an access list does not allow dev; DeviceLost when the
  // owner or dev is closed; the backend's errors (out of fds, RLIMIT_MEMLOCK for a
  // registration, a dma-buf dev cannot reach) otherwise.
  std::uint32_t handle_for(const std::shared_ptr<DeviceCore>& dev);
  // Whether another device may use the memory now (pointer attributes' `portable`).
  bool shared() const { return !access_ || !access_->empty(); }
  // The other devices that have a view (live ones), for free_host_sync.
  std::vector<std::shared_ptr<DeviceCore>> peers();
  // Releases every view (the buffer is being freed); later handle_for calls are refused.
  void release() noexcept;

 private:
  struct View {
    std::weak_ptr<DeviceCore> dev;  // owner-equivalence identifies the device: no ABA
    BoMapping bo;
  };
  BoMapping make_view(DeviceCore& dev);

  std::mutex m_;
  std::weak_ptr<DeviceCore> owner_;
  MemoryType type_;
  void* ptr_;
  std::size_t size_;
  std::uint32_t uapi_flags_;
  std::shared_ptr<const AccessList> access_;
  std::uint32_t owner_handle_ = 0;
  bool released_ = false;
  std::vector<View> views_;  // under m_
};

}  // namespace hostrt::detail
