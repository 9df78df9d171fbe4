/*
 * hostrt pool C API: the caching, stream-ordered pinned-memory pool (hostrt::Pool, whose
 * header hostrt/pool.hpp states the semantics) for C callers, beside hostrt.h.
 *
 * Every call returns an hrtError_t and never lets a C++ exception escape; a failing call
 * records its code and message as hostrt.h's calls do (hrtGetLastError,
 * hrtPeekAtLastError, hrtGetLastErrorMessage).
 *
 * Streams follow hostrt.h: NULL is the current device's default stream, and a handle must be
 * live. A stream must stay live while the pool refers to it (blocks allocated on it, frees
 * pending on it): hrtPoolSynchronize before destroying it. hrtPoolMalloc / hrtPoolFree are
 * the stream-less forms (no home stream; free on the home stream).
 */
#ifndef HOSTRT_HOSTRT_POOL_H_
#define HOSTRT_HOSTRT_POOL_H_

#include <stddef.h>
#include <stdint.h>

#include "hostrt/hostrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hrtPool* hrtPool_t;

/* Zero means "the default" for every field (see hostrt::PoolOptions). */
typedef struct hrtPoolProps {
  size_t maxBytes;         /* upper bound on reserved bytes; 0: none */
  size_t releaseThreshold; /* idle bytes kept when segments go idle; 0: keep all */
  size_t threadCacheBytes; /* per-thread cache budget; 0: default (1 MiB) */
  int disableThreadCache;  /* nonzero: no per-thread caches */
  int syncOnFree;          /* nonzero: debug mode, frees wait for the device */
} hrtPoolProps;

typedef struct hrtPoolStats {
  size_t reservedBytes, peakReservedBytes;
  size_t allocatedBytes, peakAllocatedBytes;
  size_t requestedBytes, peakRequestedBytes;
  size_t pendingFreeBytes, cachedBytes, freeBytes;
  size_t segments, smallSegments, largeSegments;
  uint64_t allocations, deallocations, hits, misses, freesWaited, waits, segmentsReleased;
} hrtPoolStats;

/* A pool on the device of `stream` (NULL: this thread's current device). props may be NULL. */
hrtError_t hrtPoolCreate(hrtPool_t* pool, hrtStream_t stream, const hrtPoolProps* props);
/* Waits for the pool's pending work, then returns all its memory. NULL is a no-op. */
hrtError_t hrtPoolDestroy(hrtPool_t pool);

hrtError_t hrtPoolMallocAsync(hrtPool_t pool, void** ptr, size_t size, hrtStream_t stream);
hrtError_t hrtPoolFreeAsync(hrtPool_t pool, void* ptr, hrtStream_t stream);
hrtError_t hrtPoolMalloc(hrtPool_t pool, void** ptr, size_t size); /* no home stream */
hrtError_t hrtPoolFree(hrtPool_t pool, void* ptr);                 /* on the home stream */
hrtError_t hrtPoolRecordStream(hrtPool_t pool, void* ptr, hrtStream_t stream);

hrtError_t hrtPoolReserve(hrtPool_t pool, size_t largeBytes, size_t smallBytes);
hrtError_t hrtPoolTrimTo(hrtPool_t pool, size_t keepBytes, size_t* releasedBytes /* may be NULL */);
hrtError_t hrtPoolSetReleaseThreshold(hrtPool_t pool, size_t bytes);
hrtError_t hrtPoolSynchronize(hrtPool_t pool);
hrtError_t hrtPoolGetStats(hrtPool_t pool, hrtPoolStats* stats);

#ifdef __cplusplus
}
#endif

#endif /* HOSTRT_HOSTRT_POOL_H_ */
