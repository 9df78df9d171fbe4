// PoolCore: each thread's deferred frees (DeferredFrees, deferred_frees.hpp): taken back by the
// thread's own allocations without the arena lock, and given to the shared pending queues or
// the arena when the list is full, when the thread drains, or when the whole pool must see
// them (synchronize, trim, out of memory).
#include "detail/pool/pool_core_internal.hpp"
// (first: it sets the warm paths' code generation)

#include <new>
#include <utility>

#include "detail/trace.hpp"

namespace hostrt::detail::pool {

namespace {

// b's work has ended.
void let_go_of_streams(Block* b, std::vector<std::shared_ptr<const void>>& released) noexcept {
  b->side->waits.clear();
  hand_over_keeps(*b->side, released);
  trace::emit(trace::Kind::PoolReusable, b->addr, b->size);
}

}  // namespace

Block* PoolCore::take_deferred(ThreadCache& tc, std::size_t rounded) noexcept {
  DeferredFrees& d = tc.deferred;
  Block* got = nullptr;
  {
    std::lock_guard lk(d.m);
    if (d.empty()) return nullptr;
    d.remove_if(
        [&](Block* b) {
          if (b->size != rounded || !waits_reached(b)) return false;
          got = b;
          return true;
        },
        /*first_only=*/true);
    if (got == nullptr) return nullptr;
    ThreadCounters::bump(tc.counters.deferred, -static_cast<std::int64_t>(got->size));
  }
  // Off the list, the block is this thread's alone: its stream references go after the lock
  // (a last one destroys a stream, which calls the driver), with no list to carry them.
  got->side->waits.clear();
  got->side->keeps.clear();
  trace::emit(trace::Kind::PoolReusable, got->addr, got->size);
  return got;
}

std::size_t PoolCore::settle_deferred_locked(ThreadCache& tc, bool ended_only,
                                             StreamKeeps& released) noexcept {
  DeferredFrees& d = tc.deferred;
  std::size_t moved = 0;
  std::lock_guard lk(d.m);
  d.remove_if([&](Block* b) {
    const auto size = static_cast<std::int64_t>(b->size);  // arena_.free may merge b away
    if (ended_only) {
      if (!waits_reached(b)) return false;
      let_go_of_streams(b, released);
      arena_.free(b);
    } else {
      try {
        pending_.add(b, /*retained=*/true);  // reclaim_locked moves the ended ones on
      } catch (const std::bad_alloc&) {
        return false;  // stays listed, still seen by stats and the next settle
      }
    }
    ThreadCounters::bump(tc.counters.deferred, -size);
    ++moved;
    return true;
  });
  return moved;
}

std::size_t PoolCore::adopt_deferred_locked() noexcept {
  std::size_t moved = 0;
  StreamKeeps none;  // moving into the shared queues lets go of no stream
  std::lock_guard lk(registry_mu_);
  for (const auto& l : links_) moved += settle_deferred_locked(l->cache, false, none);
  return moved;
}

}  // namespace hostrt::detail::pool
