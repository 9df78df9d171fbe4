// The pool's C API (hostrt_pool.h): thin wrappers over hostrt::Pool, sharing the runtime's
// handles, status translation and per-thread last error (detail/c_api_support.hpp).
#include <atomic>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "detail/access.hpp"
#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "detail/free_gate.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt.hpp"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"

struct hrtPool {
  hostrt::Device device;  // shares the pool's device internals; keeps them alive
  // What NULL means for this pool's calls: its device's default stream, held so that blocks
  // allocated on it can still be freed after hrtDeviceReset (the reset drops the runtime's
  // own reference). Empty when the device had no C default stream to give.
  std::shared_ptr<hrtStream> null_stream;
  std::unique_ptr<hostrt::Pool> owned;  // hrtPoolCreate's; empty for a device's default pool
  hostrt::Pool* pool;                   // owned, or the device's default pool
};

namespace {

using hostrt::detail::capi::expect;
using hostrt::detail::capi::stream_of;

// The runtime's translation and last error (hrtGetLastError / hrtGetLastErrorMessage), for
// bodies that return nothing.
template <class F>
hrtError_t guarded(const char* fn, F&& body) noexcept {
  return hostrt::detail::capi::guarded(fn, [&] {
    body();
    return hrtSuccess;
  });
}

using hostrt::detail::capi::HandleRegistry;

hrtPool& pool_of(hrtPool_t p) {
  return hostrt::detail::capi::handle_object(p, "NULL pool", "unknown or destroyed pool");
}

// A pool call's stream: NULL is the default stream of the pool's own device (not the
// current device's, which may be another one, or a new one after hrtDeviceReset).
hostrt::Stream& stream_for(hrtPool& p, hrtStream_t s) {
  if (s != nullptr || !p.null_stream) return stream_of(s);
  return p.null_stream->stream;
}

// The handles of the devices' default pools, one per device, made on first request. Never
// destroyed (handles may be used from static destructors); see device_reset_pools.
struct DefaultPools {
  std::mutex m;
  std::map<const hostrt::detail::DeviceCore*, hrtPool_t> by_device;
  // Bumped whenever a handle leaves by_device: every thread's DefaultHandleSeen misses then.
  std::atomic<std::uint64_t> epoch{1};
};
DefaultPools& default_pools() {
  static DefaultPools* d = new DefaultPools;
  return *d;
}

// Made also by hrtMallocAsync on the default pool: the handle holds the device's default
// stream, so that blocks allocated on it can be freed after hrtDeviceReset.
hrtPool_t default_pool_handle(const std::shared_ptr<hostrt::detail::DeviceCore>& device) {
  auto& dp = default_pools();
  const hostrt::detail::DeviceCore* key = device.get();
  {
    std::lock_guard lk(dp.m);
    if (auto it = dp.by_device.find(key); it != dp.by_device.end()) return it->second;
  }
  auto h = std::make_unique<hrtPool>(hrtPool{hostrt::detail::Access::device(device),
                                             hostrt::detail::capi::default_stream_of(key), nullptr,
                                             &device->default_pool()});
  std::lock_guard lk(dp.m);
  auto it = dp.by_device.find(key);
  if (it == dp.by_device.end())
    it = dp.by_device.emplace(key, HandleRegistry::instance().add(std::move(h))).first;
  return it->second;
}

// The device whose default pool's handle this thread last made sure of (hrtMallocAsync asks
// on every call), valid while DefaultPools::epoch has not moved.
struct DefaultHandleSeen {
  const hostrt::detail::DeviceCore* device = nullptr;
  std::uint64_t epoch = 0;
};
thread_local DefaultHandleSeen t_default_handle_seen;

void ensure_default_pool_handle(const std::shared_ptr<hostrt::detail::DeviceCore>& device) {
  const std::uint64_t epoch = default_pools().epoch.load(std::memory_order_acquire);
  if (t_default_handle_seen.device == device.get() && t_default_handle_seen.epoch == epoch) return;
  (void)default_pool_handle(device);
  t_default_handle_seen = {device.get(), epoch};
}

bool is_default_handle(const hrtPool& p) { return p.owned == nullptr; }

// Pools hrtPoolDestroy could not destroy yet because blocks are still allocated from them:
// as cudaMemPoolDestroy, the blocks stay valid until freed (hrtFreeAsync still finds them),
// and the pool goes once nothing is allocated or pending in it. Never destroyed itself.
struct Retired {
  std::mutex m;
  std::vector<std::unique_ptr<hrtPool>> pools;
  std::atomic<bool> any{false};  // hrtFreeAsync's check, without the lock
  // Passed by every hrtFreeAsync for its whole call, closed to destroy a pool: a free that
  // found a retired pool may still be inside it when its last block is back.
  hostrt::detail::FreeGate frees;
};
Retired& retired() {
  static Retired* r = new Retired;
  return *r;
}

bool idle(hostrt::Pool& pool) {
  if (pool.stats().allocated_bytes != 0) return false;
  pool.trim(0);  // takes back the pending frees the device has finished with, without waiting
  return pool.stats().pending_free_bytes == 0;
}

// Destroys the retired pools that are idle: outside the lock, since destroying a pool
// returns its segments to the driver.
void reap_retired() {
  auto& r = retired();
  if (!r.any.load(std::memory_order_acquire)) return;
  std::vector<std::unique_ptr<hrtPool>> done;
  {
    std::lock_guard lk(r.m);
    for (auto& p : r.pools) {
      try {
        if (idle(*p->pool)) done.push_back(std::move(p));
      } catch (...) {  // a lost device: keep it; its blocks may still be freed
      }
    }
    std::erase(r.pools, nullptr);
    r.any.store(!r.pools.empty(), std::memory_order_release);
  }
  if (done.empty()) return;
  r.frees.closed([&done] { done.clear(); });
}

void retire(hrtPool* pool) {
  std::unique_ptr<hrtPool> owned(pool);  // destroyed rather than leaked if anything throws
  // The handle is gone: no allocation reaches the pool through it, nor as the device's
  // current pool (hrtMallocAsync).
  if (hostrt::detail::DeviceCore* d = hostrt::detail::Access::device_core(*pool->pool))
    d->forget_mem_pool(pool->pool);
  pool->pool->set_retain_bytes(0);  // idle segments go back at once
  auto& r = retired();
  std::lock_guard lk(r.m);
  r.pools.push_back(std::move(owned));
  r.any.store(true, std::memory_order_release);
}

}  // namespace

// The device is closed: its default pool refuses allocations from now on. Its handle goes
// with it when nothing is allocated from it (the device's internals may then go too);
// otherwise the handle stays valid so that the blocks can still be freed, and the pool
// returns each segment to the driver as soon as it is idle (retain_bytes 0).
void hostrt::detail::capi::device_reset_pools(Device& device) noexcept {
  auto& dp = default_pools();
  std::unique_ptr<hrtPool> owned;
  {
    std::lock_guard lk(dp.m);
    auto it = dp.by_device.find(hostrt::detail::Access::core(device).get());
    if (it == dp.by_device.end()) return;
    owned = HandleRegistry::instance().remove(it->second);
    dp.by_device.erase(it);
    dp.epoch.fetch_add(1, std::memory_order_acq_rel);
    if (!owned) return;
    try {
      owned->pool->synchronize();
    } catch (...) {  // the device is closed: pending frees may not be waited for
    }
  }
  hrtPool* h = owned.release();
  // As for hrtPoolDestroy: blocks still allocated stay valid and freeable (hrtFreeAsync finds
  // the pool by address; NULL then means the block's own stream, which the handle keeps), and
  // the handle, with the closed device's internals it holds, goes once the last is back.
  bool now = false;
  try {
    now = idle(*h->pool);
  } catch (...) {  // a lost device: its blocks may still be freed; retire it
  }
  if (now) {
    delete h;
    return;
  }
  try {
    retire(h);
  } catch (...) {  // no memory to list it: retire() destroyed the handle, not the pool
  }
}

extern "C" {

hrtError_t hrtPoolCreate(hrtPool_t* pool, hrtStream_t stream, const hrtPoolProps* props) {
  return guarded(__func__, [&] {
    expect(pool != nullptr, hrtErrorInvalidValue, "NULL pool out-pointer");
    hostrt::PoolOptions o;
    if (props != nullptr) {
      constexpr std::size_t kFirstSize = offsetof(hrtPoolProps, sharedLargeSegments) + sizeof(int);
      expect(props->size == 0 || props->size >= kFirstSize, hrtErrorInvalidValue,
             "hrtPoolProps.size " + std::to_string(props->size) + " is neither 0 nor sizeof(hrtPoolProps)");
      if (props->maxBytes != 0) o.max_bytes = props->maxBytes;
      if (props->size != 0 || props->retainBytes != 0) o.retain_bytes = props->retainBytes;
      if (props->threadCacheBytes != 0) o.thread_cache_bytes = props->threadCacheBytes;
      if (props->disableThreadCache != 0) o.thread_cache_bytes = 0;
      o.sync_on_free = props->syncOnFree != 0;
      o.shared_large_segments = props->sharedLargeSegments != 0;
    }
    // The pool's device is the stream's (NULL: the current device's default stream), held
    // through a Device handle sharing its internals.
    hostrt::Stream& s = stream_of(stream);
    const std::shared_ptr<hostrt::detail::DeviceCore>& core = hostrt::detail::Access::core(s)->device();
    auto p = std::make_unique<hrtPool>(hrtPool{hostrt::detail::Access::device(core),
                                               hostrt::detail::capi::default_stream_of(core.get()), nullptr,
                                               nullptr});
    p->owned = std::make_unique<hostrt::Pool>(p->device, o);
    p->pool = p->owned.get();
    *pool = HandleRegistry::instance().add(std::move(p));
  });
}

hrtError_t hrtPoolDestroy(hrtPool_t pool) {
  return guarded(__func__, [&] {
    if (pool == nullptr) return;
    const hrtPool* live = HandleRegistry::instance().find(pool);
    expect(live == nullptr || !is_default_handle(*live), hrtErrorInvalidValue,
           "a device's default pool cannot be destroyed");
    std::unique_ptr<hrtPool> owned = HandleRegistry::instance().remove(pool);
    expect(owned != nullptr, hrtErrorInvalidResourceHandle, "unknown or destroyed pool");
    // The handle is gone from here on: the pool is destroyed now or retired, never leaked.
    bool now = false;
    try {
      now = idle(*owned->pool);
    } catch (...) {  // a lost device: its blocks may still be freed; retire it
    }
    if (!now) retire(owned.release());
    reap_retired();
  });
}

hrtError_t hrtPoolMallocAsync(hrtPool_t pool, void** ptr, size_t size, hrtStream_t stream) {
  return guarded(__func__, [&] {
    expect(ptr != nullptr, hrtErrorInvalidValue, "NULL out-pointer");
    *ptr = [&]() -> void* {
      hrtPool& h = pool_of(pool);
      return h.pool->allocate(size, stream_for(h, stream));
    }();
  });
}

hrtError_t hrtPoolFreeAsync(hrtPool_t pool, void* ptr, hrtStream_t stream) {
  return guarded(__func__, [&] {
    hrtPool& h = pool_of(pool);
    h.pool->deallocate(ptr, stream_for(h, stream));
  });
}

hrtError_t hrtPoolMalloc(hrtPool_t pool, void** ptr, size_t size) {
  return guarded(__func__, [&] {
    expect(ptr != nullptr, hrtErrorInvalidValue, "NULL out-pointer");
    *ptr = pool_of(pool).pool->allocate(size);
  });
}

// cudaFree of stream-ordered memory synchronizes the device first: so does this, so that the
// block is reusable at once (its home stream's work has ended) and everything queued before
// has ended when it returns. A failed job is returned before anything is freed (a retry
// frees: the failure is reported once). A closed device has nothing left to synchronize with:
// the free is then stream-ordered on the home stream, as hrtPoolFreeAsync's.
hrtError_t hrtPoolFree(hrtPool_t pool, void* ptr) {
  return guarded(__func__, [&] {
    hrtPool& h = pool_of(pool);
    if (ptr != nullptr && h.device.is_open()) h.device.synchronize();
    h.pool->deallocate(ptr);
  });
}

hrtError_t hrtPoolRecordStream(hrtPool_t pool, void* ptr, hrtStream_t stream) {
  return guarded(__func__, [&] {
    hrtPool& h = pool_of(pool);
    h.pool->record_stream(ptr, stream_for(h, stream));
  });
}

hrtError_t hrtPoolReserve(hrtPool_t pool, size_t largeBytes, size_t smallBytes) {
  return guarded(__func__, [&] { pool_of(pool).pool->reserve(largeBytes, smallBytes); });
}

hrtError_t hrtPoolTrimTo(hrtPool_t pool, size_t keepBytes, size_t* releasedBytes) {
  return guarded(__func__, [&] {
    const std::size_t r = pool_of(pool).pool->trim(keepBytes);
    if (releasedBytes != nullptr) *releasedBytes = r;
  });
}

hrtError_t hrtPoolSetRetainBytes(hrtPool_t pool, size_t bytes) {
  return guarded(__func__, [&] { pool_of(pool).pool->set_retain_bytes(bytes); });
}

hrtError_t hrtPoolSynchronize(hrtPool_t pool) {
  return guarded(__func__, [&] { pool_of(pool).pool->synchronize(); });
}

hrtError_t hrtPoolGetStats(hrtPool_t pool, hrtPoolStats* stats) {
  return guarded(__func__, [&] {
    expect(stats != nullptr, hrtErrorInvalidValue, "NULL stats");
    const hostrt::PoolStats s = pool_of(pool).pool->stats();
    *stats = hrtPoolStats{s.reserved_bytes,
                          s.peak_reserved_bytes,
                          s.allocated_bytes,
                          s.peak_allocated_bytes,
                          s.requested_bytes,
                          s.peak_requested_bytes,
                          s.pending_free_bytes,
                          s.cached_bytes,
                          s.free_bytes,
                          s.segments,
                          s.small_segments,
                          s.large_segments,
                          s.allocations,
                          s.deallocations,
                          s.hits,
                          s.misses,
                          s.frees_waited,
                          s.waits,
                          s.segments_released};
  });
}

hrtError_t hrtPoolResetPeakStats(hrtPool_t pool) {
  return guarded(__func__, [&] { pool_of(pool).pool->reset_peak_stats(); });
}

hrtError_t hrtDeviceGetDefaultMemPool(hrtPool_t* pool, int device) {
  return guarded(__func__, [&] {
    expect(pool != nullptr, hrtErrorInvalidValue, "NULL pool out-pointer");
    *pool = default_pool_handle(hostrt::detail::Access::core(*hostrt::detail::capi::device_at(device)));
  });
}

hrtError_t hrtDeviceSetMemPool(int device, hrtPool_t pool) {
  return guarded(__func__, [&] {
    hostrt::Pool& p = *pool_of(pool).pool;
    hostrt::detail::capi::device_at(device)->set_mem_pool(p);
  });
}

hrtError_t hrtDeviceGetMemPool(hrtPool_t* pool, int device) {
  return guarded(__func__, [&] {
    expect(pool != nullptr, hrtErrorInvalidValue, "NULL pool out-pointer");
    const auto d = hostrt::detail::capi::device_at(device);
    hostrt::Pool* current = &d->mem_pool();
    if (current == &d->default_pool()) {
      *pool = default_pool_handle(hostrt::detail::Access::core(*d));
      return;
    }
    hrtPool_t h = HandleRegistry::instance().find_if<hrtPool>(
        [current](const hrtPool& x) { return x.pool == current; });
    expect(h != nullptr, hrtErrorInvalidValue, "the device's pool has no C handle");
    *pool = h;
  });
}

hrtError_t hrtMemPoolSetAccess(hrtPool_t pool, int device, hrtMemAccessFlags flags) {
  return guarded(__func__, [&] {
    hostrt::Pool& p = *pool_of(pool).pool;
    std::underlying_type_t<hrtMemAccessFlags> f;
    std::memcpy(&f, &flags, sizeof f);  // any int a C caller put there
    expect(f != hrtMemAccessFlagsProtRead, hrtErrorNotSupported,
           "ProtRead: the driver cannot import a buffer read-only; use ProtReadWrite");
    expect(f == hrtMemAccessFlagsProtNone || f == hrtMemAccessFlagsProtReadWrite, hrtErrorInvalidValue,
           "unknown access flags " + std::to_string(f));
    p.set_access(*hostrt::detail::capi::device_at(device), f == hrtMemAccessFlagsProtReadWrite);
  });
}

hrtError_t hrtMemPoolGetAccess(hrtMemAccessFlags* flags, hrtPool_t pool, int device) {
  return guarded(__func__, [&] {
    expect(flags != nullptr, hrtErrorInvalidValue, "NULL flags out-pointer");
    hostrt::Pool& p = *pool_of(pool).pool;
    *flags = p.has_access(*hostrt::detail::capi::device_at(device)) ? hrtMemAccessFlagsProtReadWrite
                                                                    : hrtMemAccessFlagsProtNone;
  });
}

hrtError_t hrtMallocAsync(void** ptr, size_t size, hrtStream_t stream) {
  return guarded(__func__, [&] {
    expect(ptr != nullptr, hrtErrorInvalidValue, "NULL out-pointer");
    hostrt::Stream& s = stream_of(stream);
    const std::shared_ptr<hostrt::detail::DeviceCore>& d = hostrt::detail::Access::core(s)->device();
    d->backend(__func__);  // DeviceLost once closed, UsedAfterFork in a child
    hostrt::Pool& current = d->mem_pool();
    if (&current == &d->default_pool()) ensure_default_pool_handle(d);
    *ptr = current.allocate(size, s);
  });
}

hrtError_t hrtFreeAsync(void* ptr, hrtStream_t stream) {
  const hrtError_t rc = guarded(__func__, [&] {
    if (ptr == nullptr) return;
    const hostrt::detail::FreeGate::Inside no_pool_destroyed(retired().frees);
    hostrt::Pool* owner = hostrt::detail::find_pool(ptr);
    expect(owner != nullptr, hrtErrorInvalidValue, "pointer was not allocated from a pool");
    if (stream != nullptr) {
      owner->deallocate(ptr, stream_of(stream));
      return;
    }
    // NULL: the default stream of the pool's device, or (that device reset) the block's own.
    if (auto s = hostrt::detail::capi::default_stream_of(hostrt::detail::Access::device_core(*owner))) {
      owner->deallocate(ptr, s->stream);
      return;
    }
    auto& handles = HandleRegistry::instance();
    const hrtPool* h =
        handles.find(handles.find_if<hrtPool>([owner](const hrtPool& x) { return x.pool == owner; }));
    if (h != nullptr && h->null_stream) {
      owner->deallocate(ptr, h->null_stream->stream);
      return;
    }
    owner->deallocate(ptr);
  });
  reap_retired();  // its last free may have made a destroyed pool idle
  return rc;
}

}  // extern "C"
