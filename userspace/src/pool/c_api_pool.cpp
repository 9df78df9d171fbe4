// The pool's C API (hostrt_pool.h): thin wrappers over hostrt::Pool, sharing the runtime's
// handles, status translation and per-thread last error (detail/c_api_support.hpp).
#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt.hpp"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"

struct hrtPool {
  hostrt::Device device;  // shares the stream's device internals; keeps them alive
  hostrt::Pool pool;
  hrtPool(hostrt::Device d, const hostrt::PoolOptions& o) : device(std::move(d)), pool(device, o) {}
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

using Pools = hostrt::detail::capi::HandleSet<hrtPool>;

hrtPool& pool_of(hrtPool_t p) {
  expect(p != nullptr, hrtErrorInvalidValue, "NULL pool");
  expect(Pools::instance().contains(p), hrtErrorInvalidResourceHandle, "unknown or destroyed pool");
  return *p;
}

}  // namespace

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
      if (props->size != 0 || props->releaseThreshold != 0) o.release_threshold = props->releaseThreshold;
      if (props->threadCacheBytes != 0) o.thread_cache_bytes = props->threadCacheBytes;
      if (props->disableThreadCache != 0) o.thread_cache_bytes = 0;
      o.sync_on_free = props->syncOnFree != 0;
      o.shared_large_segments = props->sharedLargeSegments != 0;
    }
    // The pool's device is the stream's (NULL: the current device's default stream), held
    // through a Device handle sharing its internals.
    hostrt::Stream& s = stream_of(stream);
    auto p = std::make_unique<hrtPool>(hostrt::Device(s.core()->device()), o);
    Pools::instance().add(p.get());
    *pool = p.release();
  });
}

hrtError_t hrtPoolDestroy(hrtPool_t pool) {
  return guarded(__func__, [&] {
    if (pool == nullptr) return;
    expect(Pools::instance().remove(pool), hrtErrorInvalidResourceHandle, "unknown or destroyed pool");
    delete pool;
  });
}

hrtError_t hrtPoolMallocAsync(hrtPool_t pool, void** ptr, size_t size, hrtStream_t stream) {
  return guarded(__func__, [&] {
    expect(ptr != nullptr, hrtErrorInvalidValue, "NULL out-pointer");
    *ptr = pool_of(pool).pool.allocate(size, stream_of(stream));
  });
}

hrtError_t hrtPoolFreeAsync(hrtPool_t pool, void* ptr, hrtStream_t stream) {
  return guarded(__func__, [&] { pool_of(pool).pool.deallocate(ptr, stream_of(stream)); });
}

hrtError_t hrtPoolMalloc(hrtPool_t pool, void** ptr, size_t size) {
  return guarded(__func__, [&] {
    expect(ptr != nullptr, hrtErrorInvalidValue, "NULL out-pointer");
    *ptr = pool_of(pool).pool.allocate(size);
  });
}

hrtError_t hrtPoolFree(hrtPool_t pool, void* ptr) {
  return guarded(__func__, [&] { pool_of(pool).pool.deallocate(ptr); });
}

hrtError_t hrtPoolRecordStream(hrtPool_t pool, void* ptr, hrtStream_t stream) {
  return guarded(__func__, [&] { pool_of(pool).pool.record_stream(ptr, stream_of(stream)); });
}

hrtError_t hrtPoolReserve(hrtPool_t pool, size_t largeBytes, size_t smallBytes) {
  return guarded(__func__, [&] { pool_of(pool).pool.reserve(largeBytes, smallBytes); });
}

hrtError_t hrtPoolTrimTo(hrtPool_t pool, size_t keepBytes, size_t* releasedBytes) {
  return guarded(__func__, [&] {
    const std::size_t r = pool_of(pool).pool.trim(keepBytes);
    if (releasedBytes != nullptr) *releasedBytes = r;
  });
}

hrtError_t hrtPoolSetReleaseThreshold(hrtPool_t pool, size_t bytes) {
  return guarded(__func__, [&] { pool_of(pool).pool.set_release_threshold(bytes); });
}

hrtError_t hrtPoolSynchronize(hrtPool_t pool) {
  return guarded(__func__, [&] { pool_of(pool).pool.synchronize(); });
}

hrtError_t hrtPoolGetStats(hrtPool_t pool, hrtPoolStats* stats) {
  return guarded(__func__, [&] {
    expect(stats != nullptr, hrtErrorInvalidValue, "NULL stats");
    const hostrt::PoolStats s = pool_of(pool).pool.stats();
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
  return guarded(__func__, [&] { pool_of(pool).pool.reset_peak_stats(); });
}

}  // extern "C"
