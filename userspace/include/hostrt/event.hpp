// Event: a point on a stream, captured by record(). Copyable (copies name the same point).
//
// query() reads the completion page (no syscall); synchronize() blocks without spinning.
// An event keeps its stream's queue alive, so it stays valid after the Stream is destroyed.
// One Event object is not meant to be recorded and queried by two threads at once (copy it).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace hostrt {

class Stream;

namespace detail {
class StreamCore;
}

class Event {
 public:
  Event() noexcept = default;

  // Captures stream.last_submitted() and the events the stream was told to wait for since its
  // last submission: the event completes when the work submitted on the stream so far has
  // ended and so have those (an event recorded right after Stream::wait(e), with no work in
  // between, carries e, as in CUDA). Re-recording replaces all of it.
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
  using Dependency = std::pair<std::shared_ptr<detail::StreamCore>, std::uint64_t>;
  const std::shared_ptr<detail::StreamCore>& core() const noexcept { return core_; }
  const std::vector<Dependency>& dependencies() const noexcept { return deps_; }

 private:
  std::shared_ptr<detail::StreamCore> core_;
  std::uint64_t point_ = 0;
  std::vector<Dependency> deps_;  // points on other streams the recorded stream waited for
};

}  // namespace hostrt
