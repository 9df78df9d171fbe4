// RegistrationCache and the RegisteredRange it hands out: host_register without an ioctl
// for ranges already registered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "hostrt/pool_fwd.hpp"

namespace hostrt {

// A cache in front of Device::host_register: registering a range that lies inside a range
// already registered through the cache costs no ioctl, only a reference. Released
// registrations stay cached (idle) until evict()/trim or until a new registration overlaps
// them; an overlap with a range still in use throws AlreadyRegistered. A RegisteredRange
// shares the cache's index, so it may outlive the RegistrationCache object.
class RegisteredRange;

class RegistrationCache {
 public:
  // flags as for Device::host_register. Keeps the device's internals alive, like Pool.
  explicit RegistrationCache(Device& device, unsigned flags = 0);
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;
  ~RegistrationCache();

  RegisteredRange acquire(void* ptr, std::size_t bytes);
  // Unregisters every idle range; returns how many.
  std::size_t evict_idle();
  std::size_t registrations() const;  // distinct registered ranges (ioctl-backed)
  std::uint64_t hits() const;         // acquires served without an ioctl
  std::uint64_t misses() const;       // acquires that registered

 private:
  friend struct detail::Access;
  std::shared_ptr<detail::pool::RegistrationIndex> index_;
};

class RegisteredRange {
 public:
  RegisteredRange() noexcept = default;
  RegisteredRange(RegisteredRange&& o) noexcept;
  RegisteredRange& operator=(RegisteredRange&& o) noexcept;
  RegisteredRange(const RegisteredRange&) = delete;
  RegisteredRange& operator=(const RegisteredRange&) = delete;
  ~RegisteredRange() { reset(); }

  void* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  // GEM handle of the registration covering this range.
  std::uint32_t handle() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return index_ != nullptr; }
  void reset() noexcept;

 private:
  friend class RegistrationCache;
  RegisteredRange(std::shared_ptr<detail::pool::RegistrationIndex> index, std::uintptr_t key, void* ptr,
                  std::size_t bytes, std::uint32_t handle) noexcept
      : index_(std::move(index)), key_(key), ptr_(ptr), bytes_(bytes), handle_(handle) {}

  std::shared_ptr<detail::pool::RegistrationIndex> index_;
  std::uintptr_t key_ = 0;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint32_t handle_ = 0;
};

}  // namespace hostrt
