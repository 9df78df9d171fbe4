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
class Pool;

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
  // Memory freed right after a synchronize may stay charged a moment longer: the driver's
  // finished jobs hold their buffers until its scheduler frees them.
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
  // Another driver's (or device's) dma-buf as memory of this device: copies may name it like
  // host_alloc memory, and data() maps it. The caller keeps fd (close it when done; the
  // buffer holds its own reference). Drm only: NotSupported on the emulated backend.
  // InvalidArgument (error() says why) for an fd that is no dma-buf (EINVAL, EBADF) or a
  // buffer this device cannot reach (ERANGE); NotSupported when the exporter allows no CPU
  // mapping.
  PinnedBuffer import_dmabuf(int fd);

  // A new stream (cudaStreamCreateWithPriority). Priority decides which stream's work the
  // device takes next when several streams have work that is ready (its waits met): High
  // before Normal before Low, the oldest first among equals. It orders only work still
  // waiting for the engine: it never preempts a running job, and on the driver the jobs
  // already handed to the engine (up to 8) run first whatever their priority. It is not an
  // ordering guarantee between streams (use events), only a preference of the device's
  // scheduler, shared with every other process using the device. High needs CAP_SYS_NICE
  // (it runs ahead of every process's work, like raising a CPU priority): PermissionDenied
  // (EACCES) without it. OutOfMemory once the device's queues (Capabilities::max_queues)
  // are all in use.
  Stream create_stream(StreamPriority priority = StreamPriority::Normal);
  // Waits for the work submitted so far on every live stream of this device.
  void synchronize();

  // Stream-ordered allocation from the device's pool, as cudaMallocAsync / cudaFreeAsync:
  // - default_pool(): made on first use (default PoolOptions), owned by the device's
  //   internals and destroyed with them, i.e. when the last Device, Stream, buffer or pool
  //   handle of the device goes (its blocks become invalid then); it keeps them alive only
  //   while frees are pending on it. Closing the device does not destroy it: as every pool
  //   of a closed device, it refuses allocations (DeviceLost) and accepts frees.
  // - mem_pool(): the pool malloc_async allocates from; default_pool() unless set_mem_pool
  //   named another pool of this device (WrongDevice otherwise). A pool that is destroyed
  //   stops being the device's pool; reset_mem_pool() goes back to the default one.
  // - malloc_async(n, s) = mem_pool().allocate(n, s). free_async(p, s) frees p, a block of
  //   any pool of the process, stream-ordered on s (WrongDevice if s is of another device
  //   than that pool's); InvalidArgument if no pool owns p.
  Pool& default_pool();
  Pool& mem_pool();
  void set_mem_pool(Pool& pool);
  void reset_mem_pool();
  void* malloc_async(std::size_t bytes, Stream& stream);
  static void free_async(void* p, Stream& stream);

  // Marks the device closed: later calls throw DeviceLost. Idempotent, never throws.
  void close() noexcept;
  bool is_open() const noexcept;

 private:
  friend struct detail::Access;
  explicit Device(std::shared_ptr<detail::DeviceCore> core) noexcept;
  std::shared_ptr<detail::DeviceCore> core_;
};

}  // namespace hostrt
