// Event: a point on a stream, captured by record(). Copyable (copies name the same point).
//
// query() reads the completion page (no syscall); synchronize() blocks without spinning.
// An event keeps its stream's queue alive, so it stays valid after the Stream is destroyed.
// One Event object is not meant to be recorded and queried by two threads at once (copy it).
#pragma once

#include <cstdint>
#include <memory>

namespace hostrt {

class Stream;

namespace detail {
class StreamCore;
}

class Event {
 public:
  Event() noexcept = default;

  // Captures stream.last_submitted(): the event completes when the work submitted on the
  // stream so far has ended. Re-recording replaces the previous point.
  void record(Stream& stream);
  // True once the recorded work has ended (or when never recorded). Throws DeviceFault when
  // that work failed on the device and was not reported yet.
  bool query() const;
  // Blocks until query() would be true; throws like query().
  void synchronize();

  bool recorded() const noexcept { return core_ != nullptr; }
  std::uint64_t point() const noexcept { return point_; }
  // Id of the stream recorded on, 0 if none.
  std::uint64_t stream_id() const noexcept;

  // Internal.
  const std::shared_ptr<detail::StreamCore>& core() const noexcept { return core_; }

 private:
  std::shared_ptr<detail::StreamCore> core_;
  std::uint64_t point_ = 0;
};

}  // namespace hostrt
