// fork(): a child gets copies of the parent's file descriptors and mappings, but not its
// threads (the emulated engine), and any ioctl it made on the inherited DRM file would act on
// the parent's objects (closing a GEM handle, destroying a queue). hostrt therefore refuses,
// with UsedAfterFork, every use of a device or pool the parent opened, and leaves their
// releases undone in the child. The generation below changes in every child (pthread_atfork),
// which is how a pid change is noticed without a getpid() syscall on each call.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace hostrt::detail {

// Registers the atfork handler on first call; the process's fork generation (0 until a fork
// made this process a child, then one more per generation).
std::uint64_t fork_generation() noexcept;
// The same without registering: for hot paths of objects made after a fork_generation() call.
extern std::atomic<std::uint64_t> g_fork_generation;
inline std::uint64_t current_fork_generation() noexcept {
  return g_fork_generation.load(std::memory_order_relaxed);
}
// Runs `f` in the child after every fork (the forking thread's own state, e.g. its TLS).
void on_fork_child(void (*f)()) noexcept;
[[noreturn]] void throw_used_after_fork(const std::string& what);

}  // namespace hostrt::detail
