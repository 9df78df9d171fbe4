// What the files of PoolCore (pool_core.cpp: construction and thread binding,
// pool_allocate.cpp, pool_free.cpp, pool_whole.cpp: whole-pool operations and stats) share:
// the warm paths' thread-local slot and the helpers more than one of them throws from.
// Included by those files only, first.
#pragma once

// GCC's SLP vectorizer turns copies of the two-register StreamRef into a spill and a 16-byte
// reload, a store-forwarding stall on the warm path (measured: most of its time).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-slp-vectorize")
#endif

#include <cstdint>
#include <memory>
#include <string>

#include "detail/pool/pool_core.hpp"

namespace hostrt::detail::pool {

// What a thread keeps per pool it has used. Shared between the thread (its ThreadLinks) and
// the pool's registry; the weak reference lets a thread that outlives the pool drop it safely.
struct CacheLink {
  CacheLink(std::weak_ptr<PoolCore> c, std::size_t capacity) : core(std::move(c)), cache(capacity) {}
  std::weak_ptr<PoolCore> core;
  ThreadCache cache;
};

// The last pool this thread used: the warm path's only TLS access. Trivially destructible, so
// reading it is a plain %fs-relative load with no lazy-initialization guard.
struct FastSlot {
  std::uint64_t pool_id;
  ThreadCache* cache;
};
// Initial-exec: the compiler then emits a plain %fs-relative access instead of a call to
// __tls_get_addr that the linker would only relax after register allocation has already
// saved registers around it (measured: a quarter of the warm pair). Costs a few bytes of
// the static TLS surplus if libhostrt is ever built shared and dlopen'ed. Defined in
// pool_core.cpp; in the executable the linker turns each access into one %fs-relative load.
[[gnu::tls_model("initial-exec")]] extern constinit thread_local FastSlot tl_fast;

// The pools this thread used before the one in tl_fast, most recent first: a thread that
// alternates between pools (a user pool and a staging pool) swaps one of them back into
// tl_fast without the slow path's binding. Entries of destroyed pools are never matched
// (pool ids are never reused) and so never followed.
inline constexpr std::size_t kRecentPools = 3;
[[gnu::tls_model("initial-exec")]] extern constinit thread_local FastSlot tl_recent[kRecentPools];

// tl_fast for pool `id` from tl_recent, if it is there (the previous tl_fast takes its place).
// Called from the slow paths when tl_fast is another pool's (they then retry the warm path),
// so the warm paths themselves are unchanged.
[[gnu::noinline]] inline bool promote_recent(std::uint64_t id) noexcept {
  for (FastSlot& r : tl_recent) {
    if (r.pool_id == id) {
      const FastSlot f = tl_fast;
      tl_fast = r;
      r = f;
      return true;
    }
  }
  return false;
}

// tl_fast becomes `s`; the pool it held goes to the front of tl_recent.
inline void set_fast_slot(FastSlot s) noexcept {
  if (tl_fast.pool_id != 0 && tl_fast.pool_id != s.pool_id) {
    for (std::size_t i = kRecentPools - 1; i > 0; --i) tl_recent[i] = tl_recent[i - 1];
    tl_recent[0] = tl_fast;
  }
  tl_fast = s;
}

[[noreturn]] [[gnu::noinline]] inline void throw_closed(const char* what, bool owner_destroyed) {
  if (owner_destroyed)
    throw InvalidArgument(EINVAL, std::string("pool: ") + what +
                                      ": the Pool was destroyed (its blocks stay " +
                                      "valid until freed; nothing more is allocated from it)");
  throw DeviceLost(ENODEV, std::string("pool: ") + what + ": the pool's device was closed (its blocks stay " +
                               "valid until freed; allocate from a pool of an open device)");
}

[[noreturn]] [[gnu::noinline]] inline void throw_not_allocated(std::uintptr_t addr) {
  throw InvalidArgument(EINVAL,
                        "pool: " + std::to_string(addr) +
                            " is not a block allocated from this pool (foreign pointer or double free)");
}

// The block starting at addr in a segment's usable range [base, base+size), if allocated.
[[gnu::always_inline]] inline SlotEntry allocated_at(std::uintptr_t addr, std::uintptr_t base,
                                                     std::size_t size, SlotTable::View slots) {
  SlotEntry e{nullptr, 0};
  if (addr - base < size && (addr - base) % kAlignment == 0)
    e = SlotTable::load(slots, (addr - base) / kAlignment);
  if (e.block == nullptr || e.block->addr != addr || !e.block->allocated()) throw_not_allocated(addr);
  return e;
}

}  // namespace hostrt::detail::pool
