// PoolCore: construction, the fork check, and binding threads to the pool (each thread's
// cache, its retirement when the thread exits).
#include "detail/pool/pool_core_internal.hpp"
// (first: it sets the warm paths' code generation)

#include <algorithm>
#include <cerrno>
#include <exception>
#include <string>
#include <utility>

#include "detail/fork_guard.hpp"
#include "detail/trace.hpp"

namespace hostrt::detail::pool {

[[gnu::tls_model("initial-exec")]] constinit thread_local FastSlot tl_fast{0, nullptr};
[[gnu::tls_model("initial-exec")]] constinit thread_local FastSlot tl_recent[kRecentPools]{};

namespace {

std::atomic<std::uint64_t> g_next_pool_id{1};

// Set once this thread's ThreadLinks is destroyed: from then on (other thread_local
// destructors, and on the main thread the static destructors after exit()) the thread uses
// each pool through its shared exit cache instead of a cache of its own.
constinit thread_local bool tl_exited = false;

// At thread exit, and in a child after fork() (the forking thread's warm path must miss, so
// that the slow path refuses the parent's pool).
void forget_fast_slots() noexcept {
  tl_fast = {0, nullptr};
  for (FastSlot& r : tl_recent) r = {0, nullptr};
}

// Every pool this thread has used; returns their caches when the thread exits.
class ThreadLinks {
 public:
  ThreadLinks() = default;
  ThreadLinks(const ThreadLinks&) = delete;
  ThreadLinks& operator=(const ThreadLinks&) = delete;
  ~ThreadLinks() {
    tl_exited = true;
    forget_fast_slots();
    for (auto& [id, link] : links)
      if (auto core = link->core.lock()) core->retire(*link);
  }
  std::vector<std::pair<std::uint64_t, std::shared_ptr<CacheLink>>> links;
};
thread_local ThreadLinks tl_links;

}  // namespace

std::shared_ptr<PoolCore> PoolCore::create(std::unique_ptr<SegmentSource> source,
                                           const PoolOptions& options) {
  return std::make_shared<PoolCore>(std::move(source), options);
}

PoolCore::PoolCore(std::unique_ptr<SegmentSource> source, const PoolOptions& options)
    : id_(g_next_pool_id.fetch_add(1, std::memory_order_relaxed)),
      options_(options),
      source_(std::move(source)),
      retain_bytes_(options.retain_bytes),
      fork_generation_(fork_generation()),
      arena_(PageMap::process()) {
  if (!source_) throw InvalidArgument(EINVAL, "pool: no segment source");
  on_fork_child(forget_fast_slots);
}

void PoolCore::check_process(const char* what) const {
  // The constructor installed the fork hook (fork_generation()): a plain load from here on.
  if (current_fork_generation() != fork_generation_) [[unlikely]]
    throw_used_after_fork(std::string("pool ") + what);
}

PoolCore* PoolCore::at(const void* p) noexcept {
  const Segment* s = PageMap::process().lookup(reinterpret_cast<std::uintptr_t>(p));
  return s != nullptr ? const_cast<PoolCore*>(s->owner) : nullptr;
}

PoolCore::~PoolCore() {
  // The device may still be copying into pending blocks; their memory must outlive that.
  if (abandon_pending_ || fork_generation() != fork_generation_) return;
  try {
    synchronize();
  } catch (...) {  // a lost device: nothing copies into the memory any more
  }
}

// ---- per-thread caches -------------------------------------------------------------------

// The calling thread's cache for a slow path. A thread past its ThreadLinks' destruction
// (tl_links must not be touched again) gets the pool's exit cache, with `exit_lock` held on
// it for as long as the caller uses it: that cache has no capacity (frees go to the arena),
// and the lock keeps its owner-only counters owned by one thread at a time.
ThreadCache& PoolCore::cache(std::unique_lock<std::mutex>& exit_lock) {
  if (tl_fast.pool_id == id_ || promote_recent(id_)) [[likely]]
    return *tl_fast.cache;
  if (tl_exited) [[unlikely]]
    return exit_cache(exit_lock);
  return bind_thread();
}

ThreadCache& PoolCore::exit_cache(std::unique_lock<std::mutex>& exit_lock) {
  exit_lock = std::unique_lock(exit_mu_);
  if (!exit_link_) {
    auto link = std::make_shared<CacheLink>(weak_from_this(), 0);
    std::lock_guard lk(registry_mu_);
    links_.push_back(link);
    exit_link_ = std::move(link);
  }
  return exit_link_->cache;
}

ThreadCache& PoolCore::bind_thread() {
  auto& links = tl_links.links;
  // Drop links to pools that are gone, so a long-lived thread does not collect them.
  std::erase_if(links, [](const auto& l) { return l.second->core.expired(); });
  // A traced process never takes the warm paths (tl_fast stays unset): its events are
  // recorded in the slow ones, and the warm paths carry no check at all.
  const bool warm = !trace::enabled();
  for (auto& [id, link] : links) {
    if (id == id_) {
      if (warm) set_fast_slot({id_, &link->cache});
      return link->cache;
    }
  }
  auto link = std::make_shared<CacheLink>(weak_from_this(), options_.thread_cache_bytes);
  link->cache.epoch_seen = epoch_for_caches();
  {
    std::lock_guard lk(registry_mu_);
    links_.push_back(link);
  }
  links.emplace_back(id_, link);
  if (warm) set_fast_slot({id_, &link->cache});
  return link->cache;
}

void PoolCore::retire(CacheLink& link) noexcept {
  // A fork child's exiting thread releases nothing of the parent's pools: a parent thread may
  // have held their locks at the fork, and would never release them in the child.
  if (current_fork_generation() != fork_generation_) return;
  {
    SegmentList doomed;
    std::lock_guard lk(mu_);
    drain_locked(link.cache);
    release_above_retained_locked(doomed);
  }
  std::lock_guard lk(registry_mu_);
  const ThreadCounters& c = link.cache.counters;
  retired_.allocated += c.held.load(std::memory_order_relaxed) - link.cache.cached_bytes();
  retired_.requested += c.requested.load(std::memory_order_relaxed);
  retired_.allocations += c.allocations.load(std::memory_order_relaxed);
  retired_.deallocations += c.deallocations.load(std::memory_order_relaxed);
  retired_.frees_deferred += c.frees_deferred.load(std::memory_order_relaxed);
  retired_.deferred += c.deferred.load(std::memory_order_relaxed);  // 0 unless out of memory
  std::erase_if(links_, [&](const auto& l) { return l.get() == &link; });
}

void PoolCore::flush_thread_cache() {
  check_process("flush_thread_cache");
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  SegmentList doomed;
  std::lock_guard lk(mu_);
  drain_locked(tc);
  release_above_retained_locked(doomed);
}

void PoolCore::drain_locked(ThreadCache& tc) noexcept {
  ThreadCounters::bump(tc.counters.held, -static_cast<std::int64_t>(tc.bytes()));
  tc.drain([this](Block* b) { arena_.free(b); });
  StreamKeeps none;  // moving into the shared queues lets go of no stream
  settle_deferred_locked(tc, false, none);
  tc.epoch_seen = epoch_for_caches();
}

void PoolCore::source_closed() noexcept {
  closed_.store(true, std::memory_order_release);
  flush_epoch_.fetch_add(1, std::memory_order_release);  // every warm path misses from now on
}

void PoolCore::owner_destroyed() noexcept {
  owner_destroyed_.store(true, std::memory_order_relaxed);
  source_closed();
}

}  // namespace hostrt::detail::pool
