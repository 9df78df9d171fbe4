#include "detail/host_funcs.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "detail/fork_guard.hpp"

namespace hostrt::detail {

namespace {
thread_local const StreamCore* t_running = nullptr;
}

struct HostFuncs::State {
  struct Item {
    std::uint64_t point;
    std::function<void()> fn;
  };
  std::mutex m;
  std::condition_variable work;  // the thread: a function queued, or stop
  std::condition_variable done;  // drain(): a function returned
  std::deque<Item> queue;        // the front one is waited for or running
  bool stop = false;
  // nullptr once the stream went from inside one of its functions: the thread then leaves.
  StreamCore* stream = nullptr;
  std::exception_ptr error;
  std::atomic<bool> attention{false};  // !queue.empty() || error, for the lock-free check
  std::atomic<bool> queued{false};     // !queue.empty()

  void update_attention() {
    queued.store(!queue.empty(), std::memory_order_release);
    attention.store(!queue.empty() || error != nullptr, std::memory_order_release);
  }
};

HostFuncs::HostFuncs(StreamCore& stream) : st_(std::make_shared<State>()), attention_(st_->attention) {
  st_->stream = &stream;
  thread_ = std::make_unique<std::thread>([st = st_] { run(st); });
}

HostFuncs::~HostFuncs() {
  if (st_->stream != nullptr && st_->stream->forked()) {
    (void)thread_.release();  // the parent's thread does not exist here: nothing to join
    return;
  }
  {
    std::lock_guard lk(st_->m);
    st_->stop = true;
    if (t_running == st_->stream) {
      st_->stream = nullptr;
      st_->queue.erase(st_->queue.begin() + 1, st_->queue.end());
    }
  }
  st_->work.notify_all();
  if (thread_->get_id() == std::this_thread::get_id()) {
    thread_->detach();  // its State outlives this: the thread holds it
    return;
  }
  thread_->join();
}

void HostFuncs::launch(std::uint64_t point, std::function<void()> fn) {
  {
    std::lock_guard lk(st_->m);
    st_->queue.push_back({point, std::move(fn)});
    st_->update_attention();
  }
  st_->work.notify_one();
}

// What drain() and wait_idle() share: refuse where waiting cannot end, then wait until every
// function launched so far has returned. Returns holding the lock.
std::unique_lock<std::mutex> HostFuncs::wait_empty(const char* deadlock) {
  // In a fork child the thread that would empty the queue does not exist.
  if (st_->stream != nullptr && st_->stream->forked())
    throw_used_after_fork("host functions of stream " + std::to_string(st_->stream->id()));
  std::unique_lock lk(st_->m);
  if (t_running != nullptr && t_running == st_->stream)
    throw InvalidArgument(EDEADLK, std::string(deadlock) + where(__FILE__, __LINE__));
  st_->done.wait(lk, [&] { return st_->queue.empty(); });
  return lk;
}

void HostFuncs::drain() {
  std::unique_lock lk = wait_empty(
      "a host function used its own stream: it would wait for itself (as in CUDA, host functions must not "
      "call the runtime on their stream)");
  if (std::exception_ptr e = std::exchange(st_->error, nullptr)) {
    st_->update_attention();
    std::rethrow_exception(e);
  }
}

void HostFuncs::wait_idle() {
  (void)wait_empty(
      "a host function queued work that must follow its own stream's host functions (the NULL stream's "
      "implicit order): it would wait for itself");
}

bool HostFuncs::queued() const noexcept { return st_->queued.load(std::memory_order_acquire); }

const StreamCore* HostFuncs::running() noexcept { return t_running; }

void HostFuncs::run(const std::shared_ptr<State>& st) {
  for (;;) {
    std::function<void()> fn;
    std::uint64_t point = 0;
    StreamCore* stream = nullptr;
    {
      std::unique_lock lk(st->m);
      st->work.wait(lk, [&] { return st->stop || !st->queue.empty(); });
      if (st->queue.empty() || st->stream == nullptr) return;
      stream = st->stream;
      point = st->queue.front().point;
      fn = std::move(st->queue.front().fn);
    }
    try {
      // The file outlives a closed device (hrtDeviceReset), and the work queued on it runs on.
      if (!stream->reached(point))
        stream->device()->backend_unchecked().wait_timeline(stream->timeline(), point);
    } catch (...) {  // the wait itself failed: the function still runs, late rather than never
    }
    t_running = stream;
    std::exception_ptr error;
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    t_running = nullptr;
    fn = nullptr;  // what it captured goes before drain() returns
    {
      std::lock_guard lk(st->m);
      st->queue.pop_front();
      if (error && !st->error) st->error = error;
      st->update_attention();
    }
    st->done.notify_all();
  }
}

}  // namespace hostrt::detail
