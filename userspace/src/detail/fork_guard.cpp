#include "detail/fork_guard.hpp"

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

#include "hostrt/error.hpp"

namespace hostrt::detail {

std::atomic<std::uint64_t> g_fork_generation{0};

namespace {

std::atomic<pid_t> g_parent{0};
constexpr std::size_t kMaxHooks = 8;
std::array<std::atomic<void (*)()>, kMaxHooks> g_hooks{};

void child() {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  for (auto& h : g_hooks)
    if (auto f = h.load(std::memory_order_acquire)) f();
}
void prepare() { g_parent.store(getpid(), std::memory_order_relaxed); }

void install() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(prepare, nullptr, child); });
}

}  // namespace

std::uint64_t fork_generation() noexcept {
  install();
  return g_fork_generation.load(std::memory_order_relaxed);
}

void on_fork_child(void (*f)()) noexcept {
  install();
  for (auto& h : g_hooks) {
    void (*expected)() = nullptr;
    if (h.load() == f || h.compare_exchange_strong(expected, f)) return;
  }
}

void throw_used_after_fork(const std::string& what) {
  throw UsedAfterFork(ECHILD, what + ": opened by the parent process (pid " +
                                  std::to_string(g_parent.load(std::memory_order_relaxed)) +
                                  ") before fork(); a child process must open its own device and pool");
}

}  // namespace hostrt::detail
