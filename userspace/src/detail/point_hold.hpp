// PointHold: when one point of a stream's timeline signalled, kept for as long as an Event's
// recording needs it (event timing). The stream's timeline moves on and forgets its old
// points; the hold keeps the point's own fence, whose timestamp the kernel (or the emulated
// engine) wrote when the job ended.
#pragma once

#include <cstdint>
#include <memory>

namespace hostrt::detail {

class DeviceCore;
class StreamCore;

class PointHold {
 public:
  // `point` must be submitted on `stream`; DeviceLost once its device is closed.
  PointHold(const StreamCore& stream, std::uint64_t point);
  PointHold(const PointHold&) = delete;
  PointHold& operator=(const PointHold&) = delete;
  ~PointHold();

  // When the point signalled (CLOCK_MONOTONIC ns); blocks until it has.
  std::int64_t signal_time_ns() const;

 private:
  std::shared_ptr<DeviceCore> dev_;
  std::uint32_t handle_ = 0;
};

}  // namespace hostrt::detail
