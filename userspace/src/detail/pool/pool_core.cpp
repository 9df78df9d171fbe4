#include "detail/pool/pool_core.hpp"

// GCC's SLP vectorizer turns copies of the two-register StreamRef into a spill and a 16-byte
// reload, a store-forwarding stall on the warm path (measured: most of its time).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-slp-vectorize")
#endif

#include <algorithm>
#include <cerrno>
#include <exception>
#include <string>
#include <utility>

#include "detail/fork_guard.hpp"
#include "detail/trace.hpp"

namespace hostrt::detail::pool {

// What a thread keeps per pool it has used. Shared between the thread (its ThreadLinks) and
// the pool's registry; the weak reference lets a thread that outlives the pool drop it safely.
struct CacheLink {
  CacheLink(std::weak_ptr<PoolCore> c, std::size_t capacity) : core(std::move(c)), cache(capacity) {}
  std::weak_ptr<PoolCore> core;
  ThreadCache cache;
};

namespace {

std::atomic<std::uint64_t> g_next_pool_id{1};

// The last pool this thread used: the warm path's only TLS access. Trivially destructible, so
// reading it is a plain %fs-relative load with no lazy-initialization guard.
struct FastSlot {
  std::uint64_t pool_id;
  ThreadCache* cache;
};
// Initial-exec: the compiler then emits a plain %fs-relative access instead of a call to
// __tls_get_addr that the linker would only relax after register allocation has already
// saved registers around it (measured: a quarter of the warm pair). Costs a few bytes of
// the static TLS surplus if libhostrt is ever built shared and dlopen'ed.
[[gnu::tls_model("initial-exec")]] constinit thread_local FastSlot tl_fast{0, nullptr};

// Set once this thread's ThreadLinks is destroyed: from then on (other thread_local
// destructors, and on the main thread the static destructors after exit()) the thread uses
// each pool through its shared exit cache instead of a cache of its own.
constinit thread_local bool tl_exited = false;

// Every pool this thread has used; returns their caches when the thread exits.
class ThreadLinks {
 public:
  ThreadLinks() = default;
  ThreadLinks(const ThreadLinks&) = delete;
  ThreadLinks& operator=(const ThreadLinks&) = delete;
  ~ThreadLinks() {
    tl_exited = true;
    tl_fast = {0, nullptr};
    for (auto& [id, link] : links)
      if (auto core = link->core.lock()) core->retire(*link);
  }
  std::vector<std::pair<std::uint64_t, std::shared_ptr<CacheLink>>> links;
};
thread_local ThreadLinks tl_links;

// In a child after fork(): the forking thread's warm path must miss, so that the slow path
// refuses the parent's pool.
void forget_fast_slot() { tl_fast = {0, nullptr}; }

}  // namespace

std::shared_ptr<PoolCore> PoolCore::create(std::unique_ptr<SegmentSource> source,
                                           const PoolOptions& options) {
  return std::make_shared<PoolCore>(std::move(source), options);
}

PoolCore::PoolCore(std::unique_ptr<SegmentSource> source, const PoolOptions& options)
    : id_(g_next_pool_id.fetch_add(1, std::memory_order_relaxed)),
      options_(options),
      source_(std::move(source)),
      release_threshold_(options.release_threshold),
      fork_generation_(fork_generation()),
      arena_(PageMap::process()) {
  if (!source_) throw InvalidArgument(EINVAL, "pool: no segment source");
  on_fork_child(forget_fast_slot);
}

void PoolCore::check_process(const char* what) const {
  if (fork_generation() != fork_generation_) [[unlikely]]
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
  if (tl_fast.pool_id == id_) [[likely]]
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
      if (warm) tl_fast = {id_, &link->cache};
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
  if (warm) tl_fast = {id_, &link->cache};
  return link->cache;
}

void PoolCore::retire(CacheLink& link) noexcept {
  {
    SegmentList doomed;
    std::lock_guard lk(mu_);
    drain_locked(link.cache);
    release_above_threshold_locked(doomed);
  }
  std::lock_guard lk(registry_mu_);
  const ThreadCounters& c = link.cache.counters;
  retired_.allocated += c.held.load(std::memory_order_relaxed) - c.cached.load(std::memory_order_relaxed);
  retired_.requested += c.requested.load(std::memory_order_relaxed);
  retired_.allocations += c.allocations.load(std::memory_order_relaxed);
  retired_.deallocations += c.deallocations.load(std::memory_order_relaxed);
  std::erase_if(links_, [&](const auto& l) { return l.get() == &link; });
}

void PoolCore::flush_thread_cache() {
  check_process("flush_thread_cache");
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  SegmentList doomed;
  std::lock_guard lk(mu_);
  drain_locked(tc);
  release_above_threshold_locked(doomed);
}

void PoolCore::drain_locked(ThreadCache& tc) noexcept {
  ThreadCounters::bump(tc.counters.held, -static_cast<std::int64_t>(tc.bytes()));
  tc.drain([this](Block* b) { arena_.free(b); });
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

namespace {
[[noreturn]] void throw_closed(const char* what, bool owner_destroyed) {
  if (owner_destroyed)
    throw InvalidArgument(EINVAL, std::string("pool: ") + what +
                                      ": the Pool was destroyed (its blocks stay " +
                                      "valid until freed; nothing more is allocated from it)");
  throw DeviceLost(ENODEV, std::string("pool: ") + what + ": the pool's device was closed (its blocks stay " +
                               "valid until freed; allocate from a pool of an open device)");
}
}  // namespace

// ---- allocate ----------------------------------------------------------------------------

// The warm path: a TLS load, a bin pop (indexed up to 16 KiB, hashed up to 1 MiB) and a few
// owner-only counter stores. No lock, no atomic read-modify-write, no syscall. Everything
// else (a thread new to this pool, a pending flush request, a size above 1 MiB, an empty
// bin) is allocate_slow's. The hashed bins are here too, not only in the slow path: its
// checks and calls tripled the cost of a 64 KiB pair (53 -> 22 ns).
void* PoolCore::allocate(std::size_t bytes, StreamRef home) {
  if (tl_fast.pool_id == id_) [[likely]] {
    ThreadCache& tc = *tl_fast.cache;
    if (tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed)) [[likely]] {
      // One compare for the indexed sizes, the common case; the hashed ones come second.
      ThreadCache::Taken t{nullptr, 0};
      if (bytes - 1 < ThreadCache::kDirectLimit) [[likely]]
        t = tc.pop_direct(round_up(bytes, kAlignment));
      else if (bytes - 1 < kSmallLimit)
        t = tc.pop_hashed(round_up(bytes, kAlignment));
      if (t.block != nullptr) [[likely]] {
        hand_out(tc, t.block, bytes, home);
        return reinterpret_cast<void*>(t.addr);
      }
    }
  }
  return allocate_slow(bytes, home);
}

[[gnu::noinline]] void* PoolCore::allocate_slow(std::size_t bytes, StreamRef home) {
  check_process("allocate");
  if (closed()) throw_closed("allocate", owner_destroyed_.load(std::memory_order_relaxed));
  if (bytes > kMaxRequest)
    throw InvalidArgument(EINVAL, "pool: allocate of " + std::to_string(bytes) + " bytes");
  const std::size_t rounded = block_size_for(bytes);
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  if (tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed)) {
    const ThreadCache::Taken t = tc.pop(rounded);
    if (t.block != nullptr) {
      hand_out(tc, t.block, bytes, home);
      trace::emit(trace::Kind::PoolAlloc, t.addr, t.block->size, t.block->home_id,
                  static_cast<std::uint64_t>(trace::Source::ThreadCache));
      return reinterpret_cast<void*>(t.addr);
    }
  }
  return allocate_from_arena(tc, bytes, rounded, home);
}

[[gnu::always_inline]] inline void PoolCore::hand_out(ThreadCache& tc, Block* b, std::size_t bytes,
                                                      StreamRef home) noexcept {
  b->requested = bytes;
  // Member by member: the stream arrives in two registers, and a whole-struct copy makes GCC
  // spill them and reload one 16-byte vector, a store-forwarding stall that cost more than
  // the rest of the warm path together.
  b->home_id = home ? home.key() : 0;
  b->home_ops = home.ops;
  b->set_state(BlockState::Allocated);
  ThreadCounters& c = tc.counters;
  ThreadCounters::bump(c.requested, bytes);
  ThreadCounters::bump(c.allocations, 1);
}

void* PoolCore::allocate_from_arena(ThreadCache& tc, std::size_t bytes, std::size_t rounded, StreamRef home) {
  const SizeClass cls = size_class_of(rounded);
  bool source_refused = false;
  bool grew = false;
  for (;;) {
    SegmentList doomed;  // destroyed after the lock is released (declared before it)
    StreamKeeps released;
    std::unique_lock lk(mu_);
    if (tc.epoch_seen != flush_epoch_.load(std::memory_order_relaxed)) drain_locked(tc);
    reclaim_locked(released);
    Block* b = arena_.fit(rounded);
    if (b == nullptr && tc.bytes() > 0) {
      // This thread's idle blocks may coalesce into what is needed: cheaper than the driver.
      drain_locked(tc);
      b = arena_.fit(rounded);
    }
    if (b == nullptr) {
      // Free space in the other class's segments beats growing: it is reserved already. The
      // classes stay apart as long as either has room, which is what keeps small blocks from
      // scattering over large segments in the steady state.
      b = arena_.fit_in(rounded, cls == SizeClass::Small ? SizeClass::Large : SizeClass::Small);
    }
    if (b == nullptr && arena_.has_idle()) {
      // About to grow, and idle segments could not serve this request. They stay cached only
      // while the growth keeps the pool under its high-water mark; above it they go back to
      // the driver first (after the lock), so that a pool whose sizes drift does not climb.
      const std::size_t need =
          arena_.next_segment(rounded, options_.min_segment_bytes, options_.shared_large_segments).bytes;
      doomed = arena_.take_idle_down_to(peak_reserved_ - std::min(peak_reserved_, need));
      segments_released_ += doomed.size();
    }
    if (b != nullptr) {
      hand_out(tc, b, bytes, home);
      ThreadCounters::bump(tc.counters.held, b->size);
      if (grew) ++grown_allocations_;
      sample_peaks_locked();
      trace::emit(trace::Kind::PoolAlloc, b->addr, b->size, b->home_id,
                  static_cast<std::uint64_t>(grew ? trace::Source::NewSegment : trace::Source::Arena));
      return b->ptr();
    }

    // Grow, unless the limit or an earlier refusal says no.
    const Arena::Growth growth =
        arena_.next_segment(rounded, options_.min_segment_bytes, options_.shared_large_segments);
    std::size_t seg = growth.bytes;
    const std::size_t exact = round_up(rounded, kPageSize);
    // Segments other threads are allocating right now count as reserved already: max_bytes
    // is a hard limit, not one that each of two racing growths passes on its own.
    const std::size_t room = options_.max_bytes - std::min(options_.max_bytes, arena_.reserved() + growing_);
    if (seg > room && exact <= room) seg = exact;
    if (!source_refused && seg <= room) {
      growing_ += seg;
      lk.unlock();
      doomed.clear();  // give back before taking more
      try {
        grow(seg, cls, growth.dedicated);
        grew = true;
        continue;
      } catch (const OutOfMemory&) {
        source_refused = true;  // fall through to freeing memory up, then retry once
      }
      lk.lock();
    }

    // No room: give back idle segments (they cannot serve this request, or fit() would have
    // found them), then wait for the oldest pending work; fail only when neither is possible.
    if (arena_.has_idle()) {
      doomed = arena_.take_idle(0);
      segments_released_ += doomed.size();
      source_refused = false;
      continue;
    }
    if (auto oldest = pending_.oldest()) {
      ++waits_;
      lk.unlock();
      // A device fault stays for the user's synchronize; only a wait that cannot happen at
      // all (a lost device) throws, and then waiting again would not help either.
      oldest->at.stream.wait_quiet(oldest->at.point);
      source_refused = false;
      continue;
    }
    // Other threads may be sitting on idle blocks: ask them to flush for the next caller.
    flush_epoch_.fetch_add(1, std::memory_order_relaxed);
    lk.unlock();
    throw_out_of_memory(bytes, source_refused ? "the driver refused a new segment" : "max_bytes reached");
  }
}

// The caller has added `bytes` to growing_ under the lock; this takes it off again, whether
// the segment arrives or not.
void PoolCore::grow(std::size_t bytes, SizeClass cls, bool dedicated) {
  std::unique_ptr<Segment> seg;
  try {
    // Both the driver call and the slot table's mmap happen here, with no lock held.
    seg = make_segment(source_->allocate(bytes), cls, dedicated);
    seg->owner = this;
    if (seg->size < (dedicated ? bytes : std::min(bytes, kSmallLimit)) ||
        !PageMap::representable(seg->base, seg->size))
      throw OutOfMemory(ENOMEM, "pool: segment source returned unusable memory");
    // A source that hands out more than asked could leave a dedicated segment too big for the
    // very request it was made for (the fit would refuse it, and the pool grow forever): such
    // a segment is shared instead.
    if (dedicated && seg->size - bytes > bytes / (2 * kDedicatedSlackDivisor)) seg->dedicated = false;
  } catch (...) {
    std::lock_guard lk(mu_);
    growing_ -= bytes;
    throw;
  }
  std::lock_guard lk(mu_);
  growing_ -= bytes;
  arena_.add_segment(std::move(seg));
  ++misses_;
  peak_reserved_ = std::max(peak_reserved_, arena_.reserved());
}

// ---- deallocate --------------------------------------------------------------------------

namespace {

[[noreturn]] void throw_not_allocated(std::uintptr_t addr) {
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
  if (e.block == nullptr || e.block->addr != addr || e.block->load_state() != BlockState::Allocated)
    throw_not_allocated(addr);
  return e;
}

}  // namespace

Block* PoolCore::find_allocated(const void* p) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const Segment* seg = segment_at(addr);
  if (seg == nullptr) throw_not_allocated(addr);
  return allocated_at(addr, seg->base, seg->size, seg->slots.view()).block;
}

// The free path's lookup: the thread's segment hint first, the page map otherwise.
[[gnu::always_inline]] inline SlotEntry PoolCore::find_allocated(const void* p, ThreadCache& tc) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const std::uint64_t epoch = arena_.detach_epoch();
  ThreadCache::SegmentHint& h = tc.hint;
  if (addr - h.base < h.size && h.epoch == epoch) [[likely]]
    return allocated_at(addr, h.base, h.size, h.slots);
  const Segment* seg = segment_at(addr);
  if (seg == nullptr) throw_not_allocated(addr);
  const SlotEntry e = allocated_at(addr, seg->base, seg->size, seg->slots.view());
  h = {seg->base, seg->size, seg->slots.view(), epoch};
  return e;
}

// Captures, for every stream the block may have been used on (the one it is freed on, its
// home stream, and each record_stream stream), what a free there must wait for: the last
// point submitted so far that the host has not yet seen completed, and the points that
// stream's next job would wait for (Stream::wait: the free is ordered after them too). Later
// work cannot involve the block: the caller gave it up. record_stream keeps `uses` free of
// duplicates and of the home stream, so only the stream freed on needs skipping.
// Called without a pool lock (collect may lock the stream).
void PoolCore::collect_waits(Block* b, StreamRef stream) const {
  b->waits.clear();
  b->keeps.clear();
#ifndef HOSTRT_POOL_UNSAFE_REUSE
  auto add = [b](StreamRef s) {
    if (s.unfinished() == 0) return false;
    s.collect(b->waits, b->keeps);
    return true;
  };
  const std::uint64_t freed_on = stream ? stream.key() : 0;
  if (stream) add(stream);
  if (b->home_id != 0 && b->home_id != freed_on) {
    // The home stream may be destroyed by now: gone with all its work reached, or retired
    // with its last point still to come (its address may even hold another stream since).
    std::shared_ptr<const void> keep;
    const StreamRef home = b->home_ops->find(b->home_id, keep);
    if (home && add(home) && keep) b->keeps.push_back(std::move(keep));
  }
  for (const StreamRef& u : b->uses)
    if (u.key() != freed_on) add(u);
#else
  // Deliberately wrong, to prove the reuse-safety test can fail: ignores the device.
  (void)stream;
#endif
}

// The warm path: the stream's completion check (first, while little is live across the
// call), the thread's segment hint, one slot load, and a push onto a bin. Anything
// else (a stream with unfinished work, a home stream other than `stream`, record_stream
// uses, sync_on_free, a pointer outside the hinted segment or not allocated) goes to
// deallocate_slow, which decides from scratch.
void PoolCore::deallocate(void* p, StreamRef stream) {
#ifndef HOSTRT_POOL_UNSAFE_REUSE
  if (stream && stream.unfinished() != 0) return deallocate_slow(p, stream);
#endif
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (tl_fast.pool_id == id_) [[likely]] {
    ThreadCache& tc = *tl_fast.cache;
    const ThreadCache::SegmentHint& h = tc.hint;
    const std::uintptr_t off = addr - h.base;
    if (off < h.size && off % kAlignment == 0 && h.epoch == arena_.detach_epoch()) [[likely]] {
      const SlotEntry e = SlotTable::load(h.slots, off / kAlignment);
      Block* b = e.block;
      const std::size_t size = e.units * kAlignment;
      // size is 0 when the slot table cannot hold it (4 MiB and up): never a cached size.
      if (b != nullptr && size - 1 < kSmallLimit && b->addr == addr &&
          b->load_state() == BlockState::Allocated &&
          (b->home_id == 0 || (stream && b->home_id == stream.key())) && b->uses.empty() &&
          !options_.sync_on_free && tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed) &&
          tc.push(b, addr, size)) [[likely]] {
        ThreadCounters& c = tc.counters;
        ThreadCounters::bump(c.requested, -static_cast<std::int64_t>(b->requested));
        ThreadCounters::bump(c.deallocations, 1);
        b->home_id = 0;
        b->set_state(BlockState::Cached);
        return;
      }
    }
  }
  deallocate_slow(p, stream);
}

[[gnu::noinline]] void PoolCore::deallocate_slow(void* p, StreamRef stream) {
  check_process("deallocate");
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  Block* b = find_allocated(p, tc).block;
  const std::size_t size = b->size;
  collect_waits(b, stream);
  if (trace::enabled()) [[unlikely]] {
    trace::emit(trace::Kind::PoolFree, b->addr, size, stream ? stream.key() : 0, b->waits.size());
    for (const StreamPoint& w : b->waits)
      trace::emit(trace::Kind::PoolFreeWait, b->addr, w.stream.key(), w.point);
  }

  std::exception_ptr fault;
  if (options_.sync_on_free && !b->waits.empty()) {
    // Debug mode: the caller sees the device's verdict at the free itself. The block is freed
    // either way once the work has ended (failed or not), then the error is rethrown.
    {
      std::lock_guard lk(mu_);
      ++waits_;
    }
    for (const StreamPoint& w : b->waits) {
      try {
        w.stream.wait_point(w.point);
      } catch (const Error&) {
        if (!fault) fault = std::current_exception();
      }
    }
    // A wait that failed without the work ending (a lost device, not a device fault) is no
    // completion: those points stay, and the block waits in the pending queues for them.
    std::erase_if(b->waits, [](const StreamPoint& w) { return w.stream.reached(w.point); });
    if (b->waits.empty()) b->keeps.clear();
  }

  // Everything up to here may throw (a foreign pointer, std::bad_alloc in collect_waits) and
  // has changed nothing the pool or the caller can see: the block is still allocated. From
  // here on only pending_.add can fail, and it fails before anything is committed.
  // Dropped when this function returns, after any pool lock (a last reference destroys the
  // stream, which calls the driver).
  std::vector<std::shared_ptr<const void>> use_keeps;
  const std::int64_t requested = static_cast<std::int64_t>(b->requested);
  auto commit = [&] {  // noexcept: clears the block's uses before another thread can see it
    b->uses.clear();
    use_keeps = std::move(b->use_keeps);
    b->use_keeps.clear();
    b->home_id = 0;
  };

  // Nothing left to wait for, so the block is reusable now: park it in this thread's cache
  // (no lock) if it has room.
  ThreadCounters& c = tc.counters;
  if (b->waits.empty() && tc.epoch_seen == flush_epoch_.load(std::memory_order_relaxed) &&
      tc.can_push(size)) {
    commit();
    const bool parked = tc.push(b, reinterpret_cast<std::uintptr_t>(p), size);
    (void)parked;  // can_push said it fits
    b->set_state(BlockState::Cached);
    ThreadCounters::bump(c.requested, -requested);
    ThreadCounters::bump(c.deallocations, 1);
    if (fault) std::rethrow_exception(fault);
    return;
  }
  free_locked_path(tc, b, commit);  // throws std::bad_alloc with the block still allocated
  ThreadCounters::bump(c.requested, -requested);
  ThreadCounters::bump(c.deallocations, 1);
  ThreadCounters::bump(c.held, -static_cast<std::int64_t>(size));
  if (fault) std::rethrow_exception(fault);
}

template <typename Commit>
void PoolCore::free_locked_path(ThreadCache& tc, Block* b, Commit& commit) {
  SegmentList doomed;
  StreamKeeps released;
  std::lock_guard lk(mu_);
  if (b->waits.empty()) {
    commit();
    arena_.free(b);
  } else {
    pending_.add(b);  // strong guarantee: on std::bad_alloc the block is not queued
    commit();         // before reclaim, which may hand the block to the arena
    ++frees_waited_;
  }
  // trim() asked every thread to return its cache; a thread that only frees gets here (its
  // warm free sees the new epoch) and obeys now, not at an allocation that may never come.
  if (tc.epoch_seen != flush_epoch_.load(std::memory_order_relaxed)) drain_locked(tc);
  reclaim_locked(released);
  release_above_threshold_locked(doomed);
  // No peak sampling here: a free lowers what is allocated, and the scan of every thread's
  // counters under the arena lock made each pending free slower the more threads there were.
}

void PoolCore::record_stream(void* p, StreamRef stream) {
  check_process("record_stream");
  if (!stream) throw InvalidArgument(EINVAL, "pool: record_stream with an empty stream");
  Block* b = find_allocated(p);
  auto keep = stream.retain();  // the user may destroy the stream before the free
  // Several threads may record uses of one block at once (PyTorch's record_stream on a shared
  // tensor): the arena lock orders them. A free racing a record is the caller's to order.
  std::lock_guard lk(mu_);
  if (b->home_id == stream.key()) return;
  for (const StreamRef& u : b->uses)
    if (u.key() == stream.key()) return;
  b->uses.push_back(stream);
  try {
    if (keep) b->use_keeps.push_back(std::move(keep));
  } catch (...) {
    b->uses.pop_back();
    throw;
  }
}

bool PoolCore::record_use(const void* p, StreamRef stream) {
  std::uintptr_t base = 0;
  std::size_t requested = 0;
  if (!describe(p, base, requested)) return false;
  try {
    record_stream(reinterpret_cast<void*>(base), stream);
  } catch (const InvalidArgument&) {  // freed between the two looks: not ours to record
    return false;
  }
  return true;
}

std::size_t PoolCore::block_size(const void* p) const { return find_allocated(p)->size; }

bool PoolCore::describe(const void* p, std::uintptr_t& base, std::size_t& requested) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lk(mu_);  // no block splits or merges meanwhile
  const Segment* seg = segment_at(addr);
  if (seg == nullptr || addr - seg->base >= seg->size) return false;
  // Only a block's first slot names it: the nearest named slot at or before p is its block.
  const SlotTable::View v = seg->slots.view();
  for (std::size_t i = (addr - seg->base) / kAlignment + 1; i-- > 0;) {
    const Block* b = SlotTable::load(v, i).block;
    if (b == nullptr) continue;
    if (addr - b->addr >= b->size || b->load_state() != BlockState::Allocated) return false;
    base = b->addr;
    requested = b->requested;
    return true;
  }
  return false;
}

// ---- under the arena lock ----------------------------------------------------------------

void PoolCore::reclaim_locked(StreamKeeps& released) noexcept {
  if (pending_.empty()) return;
  try {
    pending_.reclaim(
        [this](Block* b) {
          trace::emit(trace::Kind::PoolReusable, b->addr, b->size);
          arena_.free(b);
        },
        released);
  } catch (const std::bad_alloc&) {
    // Moving a block to its next stream's queue needed memory the host does not have: that
    // block stays out of the pool (a leak, not a crash), the rest are reclaimed next time.
  }
}

void PoolCore::release_above_threshold_locked(SegmentList& doomed) noexcept {
  const std::size_t threshold = release_threshold_.load(std::memory_order_relaxed);
  if (arena_.reserved() <= threshold) return;
  try {
    SegmentList idle = arena_.take_idle(threshold);
    segments_released_ += idle.size();
    for (auto& s : idle) doomed.push_back(std::move(s));
  } catch (const std::bad_alloc&) {  // nothing was detached; try again at the next free
  }
}

void PoolCore::sample_peaks_locked() noexcept {
  std::int64_t allocated = 0, requested = 0;
  {
    std::lock_guard lk(registry_mu_);
    allocated = retired_.allocated;
    requested = retired_.requested;
    for (const auto& l : links_) {
      allocated += l->cache.counters.held.load(std::memory_order_relaxed) -
                   l->cache.counters.cached.load(std::memory_order_relaxed);
      requested += l->cache.counters.requested.load(std::memory_order_relaxed);
    }
  }
  peak_allocated_ = std::max(peak_allocated_, static_cast<std::size_t>(std::max<std::int64_t>(allocated, 0)));
  peak_requested_ = std::max(peak_requested_, static_cast<std::size_t>(std::max<std::int64_t>(requested, 0)));
}

// ---- whole-pool operations ---------------------------------------------------------------

void PoolCore::reserve(std::size_t large_bytes, std::size_t small_bytes) {
  check_process("reserve");
  if (closed()) throw_closed("reserve", owner_destroyed_.load(std::memory_order_relaxed));
  if (large_bytes > kMaxRequest || small_bytes > kMaxRequest)
    throw InvalidArgument(EINVAL, "pool: reserve of more than 2^46 bytes");
  auto one = [this](std::size_t bytes, SizeClass cls) {
    if (bytes == 0) return;
    const std::size_t seg =
        round_up(std::max(bytes, cls == SizeClass::Small ? kSmallLimit : bytes), kPageSize);
    bool over = false;
    {
      std::lock_guard lk(mu_);
      over = arena_.reserved() + growing_ + seg > options_.max_bytes;
      if (!over) growing_ += seg;
    }
    if (over) throw_out_of_memory(seg, "reserve would pass max_bytes");
    grow(seg, cls);
  };
  one(large_bytes, SizeClass::Large);
  one(small_bytes, SizeClass::Small);
}

std::size_t PoolCore::trim(std::size_t keep_bytes) {
  check_process("trim");
  std::unique_lock<std::mutex> exit_lock;
  ThreadCache& tc = cache(exit_lock);
  SegmentList doomed;
  StreamKeeps streams;
  std::size_t released = 0;
  {
    std::lock_guard lk(mu_);
    flush_epoch_.fetch_add(1, std::memory_order_relaxed);
    drain_locked(tc);
    reclaim_locked(streams);
    doomed = arena_.take_idle(keep_bytes);
    segments_released_ += doomed.size();
    for (const auto& s : doomed) released += s->reserved;
  }
  trace::emit(trace::Kind::PoolTrim, released);
  return released;
}

void PoolCore::set_release_threshold(std::size_t bytes) {
  release_threshold_.store(bytes, std::memory_order_relaxed);
  SegmentList doomed;
  std::lock_guard lk(mu_);
  release_above_threshold_locked(doomed);
}

void PoolCore::synchronize() {
  check_process("synchronize");
  const trace::ApiSpan span(trace::Api::PoolSynchronize);
  std::vector<HeldPoint> points;
  {
    std::lock_guard lk(mu_);
    points = pending_.last_points();
    if (!points.empty()) ++waits_;
  }
  // Waiting on each stream's last pending point covers every earlier one of that stream. A
  // block that also waits on another stream moves to that stream's queue; loop until empty.
  while (!points.empty()) {
    // Throws only when it cannot wait (a lost device); looping on would never end.
    for (const HeldPoint& p : points) p.at.stream.wait_quiet(p.at.point);
    // Everything that may hold a stream's last reference is dropped after the lock.
    std::vector<HeldPoint> waited = std::move(points);
    points.clear();
    SegmentList doomed;
    StreamKeeps released;
    std::lock_guard lk(mu_);
    reclaim_locked(released);
    release_above_threshold_locked(doomed);
    points = pending_.last_points();
  }
}

void PoolCore::reset_peak_stats() {
  std::lock_guard lk(mu_);
  peak_reserved_ = peak_allocated_ = peak_requested_ = 0;
  const PoolStats now = stats_locked();  // samples the current values into the peaks
  peak_reserved_ = now.reserved_bytes;
}

PoolStats PoolCore::stats() const {
  std::lock_guard lk(mu_);
  return stats_locked();
}

PoolStats PoolCore::stats_locked() const {
  PoolStats s;
  std::int64_t allocated = 0, requested = 0, cached = 0;
  {
    std::lock_guard lk(registry_mu_);
    allocated = retired_.allocated;
    requested = retired_.requested;
    s.allocations = retired_.allocations;
    s.deallocations = retired_.deallocations;
    for (const auto& l : links_) {
      const ThreadCounters& c = l->cache.counters;
      allocated += c.held.load(std::memory_order_relaxed) - c.cached.load(std::memory_order_relaxed);
      requested += c.requested.load(std::memory_order_relaxed);
      cached += c.cached.load(std::memory_order_relaxed);
      s.allocations += c.allocations.load(std::memory_order_relaxed);
      s.deallocations += c.deallocations.load(std::memory_order_relaxed);
    }
  }
  s.allocated_bytes = static_cast<std::size_t>(std::max<std::int64_t>(allocated, 0));
  s.requested_bytes = static_cast<std::size_t>(std::max<std::int64_t>(requested, 0));
  s.cached_bytes = static_cast<std::size_t>(std::max<std::int64_t>(cached, 0));
  peak_allocated_ = std::max(peak_allocated_, s.allocated_bytes);
  peak_requested_ = std::max(peak_requested_, s.requested_bytes);
  s.reserved_bytes = arena_.reserved();
  s.peak_reserved_bytes = peak_reserved_;
  s.peak_allocated_bytes = peak_allocated_;
  s.peak_requested_bytes = peak_requested_;
  s.pending_free_bytes = pending_.bytes();
  s.free_bytes = arena_.free_bytes();
  s.small_segments = arena_.segments(SizeClass::Small);
  s.large_segments = arena_.segments(SizeClass::Large);
  s.segments = s.small_segments + s.large_segments;
  s.misses = misses_;
  // Counted as the complement so that the warm path need not count hits.
  s.hits = s.allocations >= grown_allocations_ ? s.allocations - grown_allocations_ : 0;
  s.frees_waited = frees_waited_;
  s.waits = waits_;
  s.segments_released = segments_released_;
  return s;
}

void PoolCore::throw_out_of_memory(std::size_t bytes, const char* why) const {
  PoolStats s = stats();
  throw PoolOutOfMemory(
      "pool: cannot allocate " + std::to_string(bytes) + " bytes: " + why + " (" + s.to_string() + ")", s);
}

}  // namespace hostrt::detail::pool
