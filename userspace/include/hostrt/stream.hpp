// Stream: an in-order queue of device work (a kernel queue on Drm), RAII.
//
// Ordering: jobs of one stream run in submission order; jobs of different streams are
// unordered unless tied by Stream::wait(event). Each job gets a sequence number 1, 2, 3...
// ("points"); the stream's completion slot (a page the driver writes, mapped read-only)
// reaches N when job N has ended, so reached() costs no syscall.
//
// Errors: a job that fails on the device (the slot's failed/error fields) is reported as a
// DeviceFault by the next synchronize / wait_point / Event::query / Event::synchronize whose
// point covers it, once.
//
// Movable, not copyable. Destroying a stream (destructor or destroy()) destroys its queue
// once no Event recorded on it is still alive; jobs already submitted still run. On a
// destroyed or moved-from stream the throwing calls throw InvalidArgument, the noexcept ones
// answer as for an empty stream (id 0, last_submitted 0, reached false).
//
// Thread safety: one stream may be used by several threads (submissions are serialised).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "hostrt/types.hpp"

namespace hostrt {

class Event;

namespace detail {
class StreamCore;
struct Access;
}  // namespace detail

class Stream {
 public:
  Stream() noexcept = default;
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  // Process-wide unique id, stable for the stream's life (0 for an empty stream).
  std::uint64_t id() const noexcept;
  std::size_t device_index() const noexcept;
  // The priority it was created with (Device::create_stream); Normal for an empty stream.
  StreamPriority priority() const noexcept;

  // Seqno of the last job submitted on this stream, 0 if none.
  std::uint64_t last_submitted() const noexcept;
  // Whether job `point` has ended (successfully or not): one read of the completion page,
  // no syscall, no lock. Point 0 is always reached. False on an empty stream.
  bool reached(std::uint64_t point) const noexcept;
  // Blocks until job `point` has ended (a syncobj wait in the kernel, no spinning); throws
  // DeviceFault when a job up to `point` failed and was not reported yet.
  void wait_point(std::uint64_t point);
  // wait_point(last_submitted()).
  void synchronize();
  // True when all submitted work has ended; throws like wait_point when some failed.
  bool query();

  // Copies n bytes, ordered after all earlier work on this stream and returning before the
  // copy runs. H2D: dst is a DevicePtr (as_void()), src host memory; D2H: the reverse; H2H:
  // host to host of any size (staged through the device buffer, whose contents it
  // overwrites). Device ranges must end at or before Capabilities::max_transfer.
  //
  // Host memory may be pinned (host_alloc), registered (host_register) or pageable:
  //  - pageable source: copied, chunk by chunk, into the stream's pinned staging ring before
  //    this call returns, so the caller may reuse it at once (as CUDA stages); a staged chunk
  //    is reused only once the host has seen its job end;
  //  - pageable destination: the call waits for each chunk's copy and copies it out
  //    (synchronous, like cudaMemcpyAsync into pageable memory).
  // A copy larger than the ring (256 KiB) waits for its oldest chunk instead of pinning more.
  // n == 0 does nothing. Errors: InvalidArgument for null/mismatched pointers, ranges
  // beyond a pinned buffer or the device buffer, memory of another device.
  void memcpy_async(void* dst, const void* src, std::size_t n, CopyKind kind);
  void memcpy_async(DevicePtr dst, const void* src, std::size_t n) {
    memcpy_async(dst.as_void(), src, n, CopyKind::H2D);
  }
  void memcpy_async(void* dst, DevicePtr src, std::size_t n) {
    memcpy_async(dst, src.as_void(), n, CopyKind::D2H);
  }

  // Work submitted on this stream after the call waits for the event's point (in-fences).
  // An event never recorded, or recorded on an idle stream, adds no dependency.
  void wait(const Event& event);

  // cudaLaunchHostFunc: runs fn on a runtime thread of this stream once the work submitted
  // before it has ended, in launch order. The device cannot wait for the host (the driver
  // takes no fence userspace signals), so work after it is held back on the host instead: the
  // next call that orders work after it on this stream (memcpy_async, Event::record,
  // synchronize, a stream-ordered free or record_stream, Device::synchronize) waits until fn
  // has returned. query() is false meanwhile. An exception fn throws is rethrown by the next
  // of those calls. As in CUDA, fn must not use this stream (InvalidArgument, EDEADLK: it
  // would wait for itself); destroying the stream waits for the functions queued on it.
  void launch_host_func(std::function<void()> fn);

  // Destroys now (see above). Never throws.
  void destroy() noexcept;
  explicit operator bool() const noexcept { return core_ != nullptr; }

 private:
  friend struct detail::Access;
  explicit Stream(std::shared_ptr<detail::StreamCore> core) noexcept;
  std::shared_ptr<detail::StreamCore> core_;
};

}  // namespace hostrt
