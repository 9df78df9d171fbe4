// Event: a point on a stream, captured by record(). Copyable (copies name the same point).
//
// query() reads the completion page (no syscall); synchronize() blocks without spinning.
// An event keeps its stream's queue alive, so it stays valid after the Stream is destroyed.
// Thread-safe, as CUDA's events are: one Event may be recorded on one thread while others
// query it, synchronize on it or make streams wait for it; each of those sees either the
// earlier recording or the new one, whole.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
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
  Event(const Event& o) : rec_(o.snapshot()) {}
  Event& operator=(const Event& o);
  ~Event() = default;

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

  bool recorded() const { return snapshot() != nullptr; }
  std::uint64_t point() const;
  // Id of the stream recorded on, 0 if none.
  std::uint64_t stream_id() const;

  // Internal: one recording, never changed once made (record() replaces the whole of it).
  using Dependency = std::pair<std::shared_ptr<detail::StreamCore>, std::uint64_t>;
  struct Recorded {
    std::shared_ptr<detail::StreamCore> core;
    std::uint64_t point = 0;
    std::vector<Dependency> deps;  // points on other streams the recorded stream waited for
  };
  // The current recording, or nullptr if never recorded.
  std::shared_ptr<const Recorded> snapshot() const {
    std::lock_guard lk(m_);
    return rec_;
  }

 private:
  mutable std::mutex m_;  // guards rec_ (the pointer; what it points to is immutable)
  std::shared_ptr<const Recorded> rec_;
};

}  // namespace hostrt
