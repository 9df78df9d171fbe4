// StreamRef: the pool's view of a stream, type-erased so the allocator core can be driven by
// hostrt::Stream in production and by a scripted fake in tests, without a virtual base class
// in the runtime's public Stream.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "detail/fork_guard.hpp"

namespace hostrt::detail::pool {

struct StreamPoint;
struct StreamRef;

// Allocates whole, aligned cache lines: a block's wait lists are written by the thread that
// frees it, and two threads' small list buffers, interleaved in one heap, shared lines (each
// thread's frees evicted the other's).
template <class T>
struct LineAllocator {
  using value_type = T;
  static constexpr std::size_t kLine = 64;
  LineAllocator() noexcept = default;
  template <class U>
  LineAllocator(const LineAllocator<U>&) noexcept {}  // NOLINT: converting, as allocators are
  T* allocate(std::size_t n) {
    if (n > (~std::size_t{0} - kLine) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = (n * sizeof(T) + kLine - 1) / kLine * kLine;
    return static_cast<T*>(::operator new (bytes, std::align_val_t{kLine}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{kLine}); }
  template <class U>
  bool operator==(const LineAllocator<U>&) const noexcept {
    return true;
  }
};
// What a free waits for, and the references keeping those streams alive.
using WaitList = std::vector<StreamPoint, LineAllocator<StreamPoint>>;
using KeepList = std::vector<std::shared_ptr<const void>, LineAllocator<std::shared_ptr<const void>>>;

// What every stream the pool sees is (a base of the runtime's StreamCore, of a destroyed
// stream's RetiredStream and of the tests' fakes): an id unique in the process for as long as
// the stream or its unfinished work exists. The pool compares streams by id, never by address:
// a stream destroyed while a block it allocated is still held may be followed by another at
// the same address.
struct StreamIdentity {
  explicit StreamIdentity(std::uint64_t id) noexcept : stream_id(id) {}
  const std::uint64_t stream_id;

  // What the warm free reads to see a stream idle without calling StreamOps::unfinished (the
  // call alone made the free save and restore six registers). `state`: the last point
  // submitted, with kWaitsQueued set while waits are queued for its next job, kept here
  // rather than pointed to (one dependent load less on every free); `completed`: the last
  // point ended (the completion page); `page_generation`: the fork generation the page is
  // mapped in (a fork child must not read it). A stream that publishes them (StreamCore)
  // sets all three before the pool sees it; one that does not keeps kWaitsQueued in `state`
  // for good, which sends every free on it to the slow path.
  static constexpr std::uint64_t kWaitsQueued = std::uint64_t{1} << 63;
  std::atomic<std::uint64_t> state{kWaitsQueued};
  const unsigned long long* completed = nullptr;  // the uapi's __u64
  std::uint64_t page_generation = 0;
  // True when a free on this stream has certainly nothing to wait for; false when it may
  // (then StreamOps::unfinished decides). Loads only, no call.
  bool idle_published() const noexcept {
    const std::uint64_t w = state.load(std::memory_order_acquire);
    if (w & kWaitsQueued) return false;
    if (page_generation != current_fork_generation()) return false;
    return w == 0 || __atomic_load_n(completed, __ATOMIC_ACQUIRE) >= w;
  }
};

struct StreamOps {
  // 0 when a free on this stream has nothing to wait for: everything submitted so far is seen
  // completed and the stream has no waits queued for its next job. Nonzero otherwise (then
  // collect() says what). One call and, in the common case, one load of the stream's state
  // besides the completion page, because it is on the pool's fast path.
  std::uint64_t (*unfinished)(const StreamIdentity* stream) noexcept;
  // Appends what a free on this stream must wait for: its last submitted point unless seen
  // reached, and every point the stream was told to wait for (Stream::wait) that its next job
  // would carry and that is not reached yet: a free ordered after an event wait must not be
  // reused before the event's work ends (CUDA's event dependencies). For points on other
  // streams it appends a reference keeping that stream alive to `keeps`. May lock the
  // stream; never called under a pool lock.
  void (*collect)(StreamIdentity* stream, WaitList& waits, KeepList& keeps);
  // Must not make a syscall: the pool calls it while holding its arena lock.
  bool (*reached)(const StreamIdentity* stream, std::uint64_t point) noexcept;
  // Blocks until `point` ended, leaving a device fault for the user's own synchronize to
  // report; throws only when it cannot wait at all (a lost device). Never called under a pool
  // lock.
  void (*wait_quiet)(StreamIdentity* stream, std::uint64_t point);
  // A reference that keeps the stream alive (may be empty when the caller guarantees that
  // itself): held by the pending-free queues, so a stream may go away right after a free.
  // Never called on the warm path (it may touch a reference count).
  std::shared_ptr<const void> (*retain)(const StreamIdentity* stream);
  // The stream with this id if it still exists (live, or destroyed with work not yet seen
  // reached), with a reference in `keep` that holds it; empty once it is gone, which its
  // owner lets happen only after all its work was reached. How a block finds its home stream
  // without keeping it alive (the warm path touches no reference count). May lock; never
  // called under a pool lock.
  StreamRef (*find)(std::uint64_t id, std::shared_ptr<const void>& keep);
};

// A non-owning reference, two words so that it travels in registers, to a stream that is alive
// while the reference is used. key() is the stream's id (see StreamIdentity).
struct StreamRef {
  StreamIdentity* stream = nullptr;
  const StreamOps* ops = nullptr;

  explicit operator bool() const noexcept { return stream != nullptr; }
  std::uint64_t key() const noexcept { return stream->stream_id; }
  std::uint64_t unfinished() const noexcept { return ops->unfinished(stream); }
  void collect(WaitList& waits, KeepList& keeps) const { ops->collect(stream, waits, keeps); }
  bool reached(std::uint64_t point) const noexcept { return point == 0 || ops->reached(stream, point); }
  void wait_quiet(std::uint64_t point) const { ops->wait_quiet(stream, point); }
  std::shared_ptr<const void> retain() const { return ops->retain(stream); }
};

// A device point the host must see completed before a block may be handed out again.
struct StreamPoint {
  StreamRef stream;
  std::uint64_t point = 0;
};

// A point handed out of the pool's lock to be waited on: carries a reference that keeps its
// stream alive while the pending queue that held it may empty meanwhile.
struct HeldPoint {
  StreamPoint at;
  std::shared_ptr<const void> keep;
};

}  // namespace hostrt::detail::pool
