// HostFuncs: the host functions of one stream (Stream::launch_host_func, hrtLaunchHostFunc),
// run on a thread of the stream's own, each once the stream's work submitted before it has
// ended, in launch order.
//
// The device cannot wait for the host: the driver takes no fence that userspace signals (a
// fence that may never signal would stall the kernel's memory management). So work meant to
// follow a host function is not queued behind it on the device; the call that would queue it
// (a copy, an event record, a stream-ordered free, a synchronize) waits until the functions
// launched before it on the stream have returned, then goes on as usual.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace hostrt::detail {

class StreamCore;

class HostFuncs {
 public:
  explicit HostFuncs(StreamCore& stream);
  HostFuncs(const HostFuncs&) = delete;
  HostFuncs& operator=(const HostFuncs&) = delete;
  // Runs what is queued first (each function once its point is reached), unless called from
  // one of the functions themselves: then the rest are dropped.
  ~HostFuncs();

  // fn runs once `point` of the stream has ended (a lost device does not stop it).
  void launch(std::uint64_t point, std::function<void()> fn);
  // Something for drain(): functions queued or running, or an exception to report.
  bool needs_drain() const noexcept { return attention_.load(std::memory_order_acquire); }
  // Functions queued or running.
  bool queued() const noexcept;
  // Blocks until every function launched so far has returned; rethrows the first exception
  // one of them threw since the last drain. InvalidArgument on the stream's own function
  // thread (it would wait for itself).
  void drain();
  // Blocks until every function launched so far has returned, as drain() does, but leaves
  // what one of them threw for the stream's own next call (another stream is ordering its
  // work after them: the NULL stream's implicit order). InvalidArgument (EDEADLK) on this
  // stream's function thread.
  void wait_idle();
  // The stream whose host function runs on the calling thread, or nullptr.
  static const StreamCore* running() noexcept;

 private:
  struct State;
  static void run(const std::shared_ptr<State>& st);
  std::unique_lock<std::mutex> wait_empty(const char* deadlock);

  std::shared_ptr<State> st_;
  std::atomic<bool>& attention_;
  std::unique_ptr<std::thread> thread_;
};

}  // namespace hostrt::detail
