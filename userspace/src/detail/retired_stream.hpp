// RetiredStream: what is left of a stream destroyed while its work was still queued. CUDA lets
// a program destroy a stream with work in flight (the work still runs); that work may still
// read or write memory the pool or a registration is about to hand back, so it stays
// watchable: the queue, its completion slot and its timeline live on under the stream's id
// until the last point is reached. Device-wide synchronization waits for it, and a pool block
// allocated on the destroyed stream finds it by id (see pool::StreamDirectory).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "detail/backend.hpp"
#include "detail/pool/stream_ref.hpp"

namespace hostrt::detail {

class DeviceCore;

class RetiredStream : public pool::StreamIdentity, public std::enable_shared_from_this<RetiredStream> {
 public:
  RetiredStream(const std::shared_ptr<DeviceCore>& dev, std::uint64_t id, QueueInfo queue,
                std::uint32_t timeline, std::uint64_t last, std::uint64_t reported_failed,
                bool blocking) noexcept;
  RetiredStream(const RetiredStream&) = delete;
  RetiredStream& operator=(const RetiredStream&) = delete;
  ~RetiredStream();  // destroys the queue and the timeline, and leaves the directory

  std::uint64_t last() const noexcept { return last_; }
  // The stream was a blocking one: the NULL stream's implicit order still covers its work.
  bool blocking() const noexcept { return blocking_; }
  bool done() const noexcept { return reached(last_); }
  bool reached(std::uint64_t point) const noexcept {
    return point == 0 || load_completed(queue_.slot) >= point;
  }
  // Blocks until the last point; DeviceFault once if a job of the stream failed (nobody else
  // can report it: the stream is gone). DeviceLost when the device is.
  void wait();
  // Blocks until the last point, reporting nothing.
  void wait_quiet();
  pool::StreamRef ref() noexcept;
  // From DeviceCore::retire, once listed: destruction releases the queue and timeline.
  void adopt() noexcept { owns_ = true; }

 private:
  std::weak_ptr<DeviceCore> dev_;  // the device lists us: no cycle
  std::size_t device_index_;
  QueueInfo queue_;
  std::uint32_t timeline_;
  std::uint64_t last_;
  std::atomic<std::uint64_t> reported_failed_;
  bool owns_ = false;  // the last failed job someone was told of
  bool blocking_;
};

}  // namespace hostrt::detail
