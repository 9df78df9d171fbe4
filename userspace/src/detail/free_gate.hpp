// FreeGate: a reader-writer gate whose readers write only their own cache line. Every
// hrtFreeAsync passes through it (a free that found a retired pool may still be inside that
// pool when its last block is back); only the destruction of a retired pool closes it. A
// std::shared_mutex made every free of every thread write one shared line (its reader count):
// 10% of the C API's allocate/free pair on one thread, and a line bouncing between freeing
// threads.
//
// Readers announce themselves in one of kSlots counters (a thread keeps its slot; threads
// beyond kSlots share one), then look at `closing_`; the closer raises `closing_`, then waits
// for every counter to drain. Both sides' store-then-load is sequentially consistent, so at
// least one of them sees the other (the reader backs off, or the closer waits for it).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <thread>

namespace hostrt::detail {

class FreeGate {
 public:
  // A free may now use any pool it finds; pair with leave().
  void enter() noexcept {
    Slot& s = slots_[my_slot()];
    for (;;) {
      s.readers.fetch_add(1, std::memory_order_seq_cst);
      if (!closing_.load(std::memory_order_seq_cst)) return;
      s.readers.fetch_sub(1, std::memory_order_release);
      std::lock_guard wait_for_the_closer(closer_);
    }
  }
  void leave() noexcept { slots_[my_slot()].readers.fetch_sub(1, std::memory_order_release); }

  // Runs f with no free inside the gate (none entered and not yet left). Must not be called by
  // a thread inside it.
  template <typename F>
  void closed(F&& f) {
    std::lock_guard one_closer(closer_);
    closing_.store(true, std::memory_order_seq_cst);
    for (const Slot& s : slots_)
      while (s.readers.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    struct Reopen {
      std::atomic<bool>& closing;
      ~Reopen() { closing.store(false, std::memory_order_release); }
    } reopen{closing_};
    f();
  }

  class Inside {
   public:
    explicit Inside(FreeGate& g) noexcept : g_(g) { g_.enter(); }
    ~Inside() { g_.leave(); }
    Inside(const Inside&) = delete;
    Inside& operator=(const Inside&) = delete;

   private:
    FreeGate& g_;
  };

 private:
  static constexpr std::size_t kSlots = 64;
  struct alignas(64) Slot {
    std::atomic<long> readers{0};
  };
  static std::size_t my_slot() noexcept {
    static std::atomic<std::size_t> next{0};
    thread_local const std::size_t slot = next.fetch_add(1, std::memory_order_relaxed) % kSlots;
    return slot;
  }

  std::array<Slot, kSlots> slots_{};
  alignas(64) std::atomic<bool> closing_{false};
  std::mutex closer_;
};

}  // namespace hostrt::detail
