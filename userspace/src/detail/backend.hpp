// The interface between the runtime and a device implementation: the UAPI's operations, one
// virtual call each, in the UAPI's own structures. DrmBackend forwards them to the driver;
// EmulatedBackend implements the same contract in process. Errors are thrown as hostrt
// exceptions carrying the errno the driver returned (or would return).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <span>
#include <string>

#include "uapi_edu_accel.hpp"

namespace hostrt::detail {

using Completion = drm_edu_accel_completion;
using CopyOp = drm_edu_accel_copy_op;
using SyncPoint = drm_edu_accel_sync;

struct BoMapping {
  std::uint32_t handle = 0;
  void* ptr = nullptr;      // CPU address: the mapping (BO_CREATE) or the user range
  std::size_t size = 0;     // usable bytes
  std::size_t map_len = 0;  // length of the mapping to undo (0 for userptr)
};

struct QueueInfo {
  std::uint32_t id = 0;
  const Completion* slot = nullptr;  // stays readable while the backend lives
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual std::string name() const = 0;
  // The device node ("/dev/dri/renderD128"), empty when there is none.
  virtual std::string node() const { return {}; }
  virtual std::uint64_t get_param(std::uint32_t param) = 0;
  // The number the driver's tracepoints and debugfs name this open file by (drm-client-id in
  // its fdinfo); 0 when there is none. Reads a file: not for hot paths.
  virtual std::uint64_t client_id() { return 0; }

  // Zeroed memory, mapped read-write into the process.
  virtual BoMapping create_bo(std::size_t bytes) = 0;
  virtual BoMapping register_user(void* ptr, std::size_t bytes, std::uint32_t uapi_flags) = 0;
  virtual void release_bo(const BoMapping& bo) noexcept = 0;
  // PRIME: the BO as a new dma-buf fd (O_CLOEXEC, read-write), owned by the caller.
  virtual int export_dmabuf(std::uint32_t handle) = 0;
  // A dma-buf as a BO of this device, mapped through the dma-buf; the caller keeps `fd`.
  virtual BoMapping import_dmabuf(int fd) = 0;
  // Portable memory: a handle on this device's file to `owner`'s BO `owner_handle` (the same
  // pages, not mapped again: ptr is nullptr, map_len 0), released with release_bo. `owner` is
  // a backend of the same kind.
  virtual BoMapping share_from(DeviceBackend& owner, std::uint32_t owner_handle) = 0;

  // priority: an enum drm_edu_accel_queue_priority. EACCES (PermissionDenied) for HIGH
  // without CAP_SYS_NICE, checked on the calling thread as the driver's capable() does.
  virtual QueueInfo create_queue(std::uint32_t priority) = 0;
  virtual void destroy_queue(std::uint32_t queue) noexcept = 0;

  // Timeline syncobjs: each stream signals its own at point == seqno.
  virtual std::uint32_t create_timeline() = 0;
  virtual void destroy_timeline(std::uint32_t handle) noexcept = 0;
  // Blocks until the point has signalled (no timeout, no spinning).
  virtual void wait_timeline(std::uint32_t handle, std::uint64_t point) = 0;
  // Another device's timeline point (already submitted there) as an in-sync of this device:
  // a new syncobj of this backend that signals with it, destroyed by the caller with
  // destroy_timeline once submitted (the job holds its fence). `other` is of the same kind;
  // `keep` keeps it alive for as long as this backend may still need it.
  virtual SyncPoint import_point(DeviceBackend& other, std::uint32_t timeline, std::uint64_t point,
                                 std::shared_ptr<const void> keep) = 0;

  // Event timing: a hold on `point` of `timeline` (submitted, maybe not reached yet) that
  // remembers when that point signalled, however far the timeline moves on. Released with
  // release_point_hold.
  virtual std::uint32_t hold_point(std::uint32_t timeline, std::uint64_t point) = 0;
  // Blocks until the held point has signalled; returns when it did (CLOCK_MONOTONIC ns).
  virtual std::int64_t held_point_time_ns(std::uint32_t hold) = 0;
  virtual void release_point_hold(std::uint32_t hold) noexcept = 0;

  // Returns the job's seqno.
  virtual std::uint64_t submit(std::uint32_t queue, std::span<const CopyOp> ops,
                               std::span<const SyncPoint> in_syncs, std::span<const SyncPoint> out_syncs) = 0;

  // A word that grows each time one of this backend's registrations is invalidated (its range
  // unmapped, remapped or its pages dropped), readable without a syscall; nullptr when the
  // backend never invalidates (the emulated one cannot see the process's mappings change).
  virtual const std::uint64_t* invalidation_counter() { return nullptr; }
  // Whether the registration behind `handle` was invalidated (the device would copy the old,
  // still pinned pages: the driver refuses it).
  virtual bool registration_stale(std::uint32_t /*handle*/) { return false; }
};

// The clock event timestamps are taken on: the kernel's ktime_get(), which fences carry.
inline std::int64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Reads of the completion page: the producer (driver or engine thread) writes failed/error
// before completed, with release order, so an acquire load of completed orders the rest.
inline std::uint64_t load_completed(const Completion* c) noexcept {
  return __atomic_load_n(&c->completed, __ATOMIC_ACQUIRE);
}
inline std::uint64_t load_failed(const Completion* c) noexcept {
  return __atomic_load_n(&c->failed, __ATOMIC_RELAXED);
}
inline std::int32_t load_error(const Completion* c) noexcept {
  return __atomic_load_n(&c->error, __ATOMIC_RELAXED);
}

std::size_t drm_device_count();
std::unique_ptr<DeviceBackend> open_drm(std::size_t index);
std::size_t emulated_device_count();
std::unique_ptr<DeviceBackend> open_emulated(std::size_t index);

}  // namespace hostrt::detail
