// Event: a point on a stream, captured by record(). Copyable (copies name the same point).
//
// query() reads the completion page (no syscall); synchronize() blocks without spinning.
// An event keeps its stream's queue alive, so it stays valid after the Stream is destroyed.
// Thread-safe, as CUDA's events are: one Event may be recorded on one thread while others
// query it, synchronize on it or make streams wait for it; each of those sees either the
// earlier recording or the new one, whole. (Assigning to an Event is not such a use.)
//
// Timing (cudaEventElapsedTime): an event's time is when the stream reached it: the moment
// the last job before it ended, as the driver's fence recorded it in the kernel, or the
// moment of record() when that job had already ended (as a GPU executes a record on an
// idle stream at once). The clock is CLOCK_MONOTONIC, on every device, so events of two
// devices compare. Recording a timing event on a busy stream costs two ioctls (a syncobj
// holding that job's fence) and a third when the recording goes; EventFlags::DisableTiming
// skips them, for events used only to order or wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

namespace hostrt {

class Stream;

namespace detail {
struct EventRecording;
struct Access;
}  // namespace detail

// cudaEventDefault, cudaEventBlockingSync, cudaEventDisableTiming: the same bits.
enum class EventFlags : unsigned {
  Default = 0,
  // Accepted for CUDA's sake: synchronize() always blocks in the kernel, never spins.
  BlockingSync = 1u << 0,
  // No timestamps: elapsed() refuses the event, and record() costs no syscall.
  DisableTiming = 1u << 1,
};
constexpr EventFlags operator|(EventFlags a, EventFlags b) noexcept {
  return static_cast<EventFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

class Event {
 public:
  Event() noexcept = default;
  // InvalidArgument for bits EventFlags does not name.
  explicit Event(EventFlags flags);
  Event(const Event& o);
  Event& operator=(const Event& o);
  ~Event() = default;

  EventFlags flags() const noexcept { return flags_; }
  bool timing() const noexcept {
    return (static_cast<unsigned>(flags_) & static_cast<unsigned>(EventFlags::DisableTiming)) == 0;
  }

  // The time from `start`'s point to `end`'s (negative when end came first), or nullopt while
  // either has not completed. InvalidArgument when either was never recorded or was recorded
  // without timing; DeviceFault as query() for work that failed.
  static std::optional<std::chrono::nanoseconds> elapsed(const Event& start, const Event& end);

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

  bool recorded() const;
  std::uint64_t point() const;
  // Id of the stream recorded on, 0 if none.
  std::uint64_t stream_id() const;

 private:
  friend struct detail::Access;
  // The current recording (detail/event_recording.hpp), or nullptr if never recorded.
  std::shared_ptr<const detail::EventRecording> snapshot() const;
  EventFlags flags_ = EventFlags::Default;
  mutable std::mutex m_;  // guards rec_ (the pointer; what it points to is immutable)
  std::shared_ptr<const detail::EventRecording> rec_;
};

}  // namespace hostrt
