// The pool's C API (hostrt_pool.h): thin wrappers over hostrt::Pool that turn exceptions into
// hrtError_t codes and keep a per-thread message.
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "detail/device_core.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt.hpp"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"

// The runtime's C handle for a stream (c_api.cpp defines it with exactly this body; the
// definitions must stay identical).
struct hrtStream {
  hostrt::Stream stream;
};

struct hrtPool {
  hostrt::Device device;  // shares the stream's device internals; keeps them alive
  hostrt::Pool pool;
  hrtPool(hostrt::Device d, const hostrt::PoolOptions& o) : device(std::move(d)), pool(device, o) {}
};

namespace {

thread_local std::string t_message;

hrtError_t fail(hrtError_t code, const char* fn, const char* what) noexcept {
  try {
    t_message = std::string(fn) + ": " + what;
  } catch (...) {
    t_message.clear();
  }
  return code;
}

struct CError {
  hrtError_t code;
  const char* message;
};

template <class F>
hrtError_t guarded(const char* fn, F&& body) noexcept {
  try {
    body();
    return hrtSuccess;
  } catch (const CError& e) {
    return fail(e.code, fn, e.message);
  } catch (const hostrt::AlreadyRegistered& e) {
    return fail(hrtErrorHostMemoryAlreadyRegistered, fn, e.what());
  } catch (const hostrt::InvalidArgument& e) {
    return fail(hrtErrorInvalidValue, fn, e.what());
  } catch (const hostrt::OutOfMemory& e) {
    return fail(hrtErrorMemoryAllocation, fn, e.what());
  } catch (const hostrt::DeviceLost& e) {
    return fail(hrtErrorDeviceLost, fn, e.what());
  } catch (const hostrt::DeviceFault& e) {
    return fail(hrtErrorLaunchFailure, fn, e.what());
  } catch (const hostrt::NotSupported& e) {
    return fail(hrtErrorNotSupported, fn, e.what());
  } catch (const std::bad_alloc&) {
    return fail(hrtErrorMemoryAllocation, fn, "out of host memory");
  } catch (const std::exception& e) {
    return fail(hrtErrorUnknown, fn, e.what());
  } catch (...) {
    return fail(hrtErrorUnknown, fn, "unknown exception");
  }
}

void expect(bool cond, hrtError_t code, const char* msg) {
  if (!cond) throw CError{code, msg};
}

hrtPool& pool_of(hrtPool_t p) {
  expect(p != nullptr, hrtErrorInvalidValue, "NULL pool");
  return *p;
}

hostrt::Stream& stream_of(hrtStream_t s) {
  expect(s != nullptr, hrtErrorInvalidValue, "NULL stream (the pool takes no default stream)");
  return s->stream;
}

// The device behind a stream, as a Device handle sharing its internals.
hostrt::Device device_of(hostrt::Stream& s) {
  expect(static_cast<bool>(s), hrtErrorInvalidResourceHandle, "destroyed stream");
  return hostrt::Device(s.core()->device());
}

}  // namespace

extern "C" {

hrtError_t hrtPoolCreate(hrtPool_t* pool, hrtStream_t stream, const hrtPoolProps* props) {
  return guarded(__func__, [&] {
    expect(pool != nullptr, hrtErrorInvalidValue, "NULL pool out-pointer");
    hostrt::PoolOptions o;
    if (props != nullptr) {
      if (props->maxBytes != 0) o.max_bytes = props->maxBytes;
      if (props->releaseThreshold != 0) o.release_threshold = props->releaseThreshold;
      if (props->threadCacheBytes != 0) o.thread_cache_bytes = props->threadCacheBytes;
      if (props->disableThreadCache != 0) o.thread_cache_bytes = 0;
      o.sync_on_free = props->syncOnFree != 0;
    }
    if (stream != nullptr) {
      *pool = new hrtPool(device_of(stream_of(stream)), o);
      return;
    }
    // The current device: reached through a stream of it, made and dropped here.
    hrtStream_t tmp = nullptr;
    const hrtError_t e = hrtStreamCreate(&tmp);
    expect(e == hrtSuccess, e, "cannot reach the current device (hrtGetLastErrorMessage says why)");
    try {
      *pool = new hrtPool(device_of(tmp->stream), o);
    } catch (...) {
      hrtStreamDestroy(tmp);
      throw;
    }
    hrtStreamDestroy(tmp);
  });
}

hrtError_t hrtPoolDestroy(hrtPool_t pool) {
  return guarded(__func__, [&] { delete pool; });
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

const char* hrtPoolGetLastErrorMessage(void) { return t_message.c_str(); }

}  // extern "C"
