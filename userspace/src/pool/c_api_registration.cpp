// The registration cache's C API (hostrt_pool.h): hostrt::RegistrationCache for C callers,
// who cannot hold RAII RegisteredRange handles; the cache object keeps them, keyed by the
// (pointer, size) they were acquired with, until hrtRegCacheRelease or destruction.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "detail/access.hpp"
#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt.hpp"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"

struct hrtRegCache {
  hostrt::Device device;  // shares the stream's device internals; keeps them alive
  hostrt::RegistrationCache cache;
  std::mutex mu;  // guards leases
  std::multimap<std::pair<std::uintptr_t, std::size_t>, hostrt::RegisteredRange> leases;
  hrtRegCache(hostrt::Device d, unsigned flags) : device(std::move(d)), cache(device, flags) {}
};

namespace {

using hostrt::detail::capi::expect;
using hostrt::detail::capi::stream_of;

template <class F>
hrtError_t guarded(const char* fn, F&& body) noexcept {
  return hostrt::detail::capi::guarded(fn, [&] {
    body();
    return hrtSuccess;
  });
}

using hostrt::detail::capi::HandleRegistry;

hrtRegCache& cache_of(hrtRegCache_t c) {
  return hostrt::detail::capi::handle_object(c, "NULL registration cache",
                                             "unknown or destroyed registration cache");
}

std::pair<std::uintptr_t, std::size_t> key(void* ptr, std::size_t size) {
  return {reinterpret_cast<std::uintptr_t>(ptr), size};
}

}  // namespace

extern "C" {

hrtError_t hrtRegCacheCreate(hrtRegCache_t* cache, hrtStream_t stream, unsigned int flags) {
  return guarded(__func__, [&] {
    expect(cache != nullptr, hrtErrorInvalidValue, "NULL cache out-pointer");
    expect((flags & ~hrtHostRegisterReadOnly) == 0u, hrtErrorInvalidValue, "unknown hrtHostRegister flags");
    hostrt::Stream& s = stream_of(stream);
    *cache = HandleRegistry::instance().add(std::make_unique<hrtRegCache>(
        hostrt::detail::Access::device(hostrt::detail::Access::core(s)->device()), flags));
  });
}

hrtError_t hrtRegCacheDestroy(hrtRegCache_t cache) {
  return guarded(__func__, [&] {
    if (cache == nullptr) return;
    expect(HandleRegistry::instance().remove(cache) != nullptr, hrtErrorInvalidResourceHandle,
           "unknown or destroyed registration cache");
  });
}

hrtError_t hrtRegCacheAcquire(hrtRegCache_t cache, void* ptr, size_t size) {
  return guarded(__func__, [&] {
    hrtRegCache& c = cache_of(cache);
    // The registration (maybe an ioctl) happens outside this object's lock.
    hostrt::RegisteredRange r = c.cache.acquire(ptr, size);
    std::lock_guard lk(c.mu);
    c.leases.emplace(key(ptr, size), std::move(r));
  });
}

hrtError_t hrtRegCacheRelease(hrtRegCache_t cache, void* ptr, size_t size) {
  return guarded(__func__, [&] {
    hrtRegCache& c = cache_of(cache);
    hostrt::RegisteredRange r;  // released after the lock
    std::lock_guard lk(c.mu);
    auto it = c.leases.find(key(ptr, size));
    expect(it != c.leases.end(), hrtErrorInvalidValue, "no acquire of this pointer and size to release");
    r = std::move(it->second);
    c.leases.erase(it);
  });
}

hrtError_t hrtRegCacheEvictIdle(hrtRegCache_t cache, size_t* evicted) {
  return guarded(__func__, [&] {
    const std::size_t n = cache_of(cache).cache.evict_idle();
    if (evicted != nullptr) *evicted = n;
  });
}

hrtError_t hrtRegCacheGetStats(hrtRegCache_t cache, hrtRegCacheStats* stats) {
  return guarded(__func__, [&] {
    expect(stats != nullptr, hrtErrorInvalidValue, "NULL stats");
    const hostrt::RegistrationCache& c = cache_of(cache).cache;
    *stats = hrtRegCacheStats{c.registrations(), c.hits(), c.misses()};
  });
}

}  // extern "C"
