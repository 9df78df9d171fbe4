// Device: one opened accelerator (an edu_accel render node, or an emulated one).
//
// Movable, not copyable. Buffers, streams and events made from a Device keep its internals
// alive, so they may outlive the Device object; after close() every operation on the device
// (including through them) throws DeviceLost, while destructors still release cleanly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "hostrt/host_memory.hpp"
#include "hostrt/stream.hpp"
#include "hostrt/types.hpp"

namespace hostrt {

namespace detail {
class DeviceCore;
}

class Device {
 public:
  // Devices of backend b: edu_accel render nodes for Drm (in render-node order), and
  // HOSTRT_EMULATED_DEVICES (default 2) for Emulated.
  static std::size_t count(Backend b = Backend::Drm);
  // Throws DeviceLost when index >= count(b) or the node cannot be opened.
  static Device open(std::size_t index, Backend b = Backend::Drm);

  Device(Device&&) noexcept;
  Device& operator=(Device&&) noexcept;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  std::size_t index() const noexcept;
  Backend backend() const noexcept;
  // "edu_accel 0.1.0 /dev/dri/renderD128" or "emulated edu #0".
  std::string name() const;
  // The render node ("/dev/dri/renderD128"); empty for an emulated device.
  std::string node() const;
  const Capabilities& capabilities() const noexcept;
  // Raw GET_PARAM (enum drm_edu_accel_param); throws InvalidArgument for unknown params.
  std::uint64_t param(std::uint32_t p) const;
  // Bytes this process has pinned or allocated on the device, as the driver charges them.
  std::uint64_t pinned_bytes() const;

  // Pinned host memory from the driver (BO_CREATE + mmap): zeroed, page-aligned, size
  // rounded up to 64 bytes. flags must be 0; 0 bytes is InvalidArgument. OutOfMemory when the
  // driver refuses or past Capabilities::max_bo_size.
  PinnedBuffer host_alloc(std::size_t bytes, unsigned flags = 0);
  // Pins [ptr, ptr+bytes) in place (BO_USERPTR). flags: kHostRegisterReadOnly.
  // AlreadyRegistered when the range overlaps memory hostrt already knows;
  // InvalidArgument for a null pointer or 0 bytes; OutOfMemory past RLIMIT_MEMLOCK.
  PinnedBuffer host_register(void* ptr, std::size_t bytes, unsigned flags = 0);
  // Waits for all work submitted on this device's streams before the call, then frees.
  void free_host_sync(PinnedBuffer&& buffer);

  Stream create_stream();
  // Waits for the work submitted so far on every live stream of this device.
  void synchronize();

  // Marks the device closed: later calls throw DeviceLost. Idempotent, never throws.
  void close() noexcept;
  bool is_open() const noexcept;

  // Internal.
  explicit Device(std::shared_ptr<detail::DeviceCore> core) noexcept;
  const std::shared_ptr<detail::DeviceCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<detail::DeviceCore> core_;
};

}  // namespace hostrt
