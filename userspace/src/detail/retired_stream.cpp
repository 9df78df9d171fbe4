#include "detail/retired_stream.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include "detail/device_core.hpp"
#include "detail/pool/stream_directory.hpp"
#include "hostrt/error.hpp"

namespace hostrt::detail {

namespace {

using pool::KeepList;
using pool::StreamIdentity;
using pool::StreamPoint;
using pool::StreamRef;
using pool::WaitList;

const RetiredStream* as_retired(const StreamIdentity* s) noexcept {
  return static_cast<const RetiredStream*>(s);
}
RetiredStream* as_retired(StreamIdentity* s) noexcept { return static_cast<RetiredStream*>(s); }

extern const pool::StreamOps kRetiredOps;
constinit const pool::StreamOps kRetiredOps = {
    [](const StreamIdentity* s) noexcept {
      return as_retired(s)->done() ? std::uint64_t{0} : as_retired(s)->last();
    },
    [](StreamIdentity* s, WaitList& waits, KeepList&) {
      RetiredStream* r = as_retired(s);
      if (!r->done()) waits.push_back({r->ref(), r->last()});
    },
    [](const StreamIdentity* s, std::uint64_t point) noexcept { return as_retired(s)->reached(point); },
    [](StreamIdentity* s, std::uint64_t) { as_retired(s)->wait_quiet(); },
    [](const StreamIdentity* s) -> std::shared_ptr<const void> { return as_retired(s)->shared_from_this(); },
    [](std::uint64_t id, std::shared_ptr<const void>& keep) {
      return pool::stream_directory().find(id, keep);
    },
};

}  // namespace

RetiredStream::RetiredStream(const std::shared_ptr<DeviceCore>& dev, std::uint64_t id, QueueInfo queue,
                             std::uint32_t timeline, std::uint64_t last, std::uint64_t reported_failed,
                             bool blocking) noexcept
    : StreamIdentity(id),
      dev_(dev),
      device_index_(dev->index()),
      queue_(queue),
      timeline_(timeline),
      last_(last),
      reported_failed_(reported_failed),
      blocking_(blocking) {}

RetiredStream::~RetiredStream() {
  pool::stream_directory().withdraw(stream_id, this);
  if (!owns_) return;
  const auto dev = dev_.lock();
  DeviceBackend* be = dev ? dev->backend_for_release() : nullptr;
  if (be == nullptr) return;  // the device is gone, and its queues with it
  be->destroy_queue(queue_.id);
  be->destroy_timeline(timeline_);
}

pool::StreamRef RetiredStream::ref() noexcept { return {this, &kRetiredOps}; }

void RetiredStream::wait_quiet() {
  if (done()) return;
  const auto dev = dev_.lock();
  if (!dev) throw DeviceLost(ENODEV, "wait for a destroyed stream's work: the device is closed");
  dev->backend("wait for a destroyed stream's work").wait_timeline(timeline_, last_);
}

void RetiredStream::wait() {
  wait_quiet();
  const std::uint64_t failed = load_failed(queue_.slot);
  if (failed == 0 || failed > last_ || reported_failed_.exchange(failed) >= failed) return;
  const int err = -load_error(queue_.slot);
  const int e = err > 0 ? err : EIO;
  throw DeviceFault(e,
                    "job " + std::to_string(failed) + " of destroyed stream " + std::to_string(stream_id) +
                        " on device " + std::to_string(device_index_) +
                        " failed on the device: " + std::strerror(e),
                    failed);
}

}  // namespace hostrt::detail
