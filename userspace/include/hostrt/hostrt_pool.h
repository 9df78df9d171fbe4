/*
 * hostrt pool C API: the caching, stream-ordered pinned-memory pool (hostrt::Pool, whose
 * header hostrt/pool.hpp states the semantics) for C callers, beside hostrt.h.
 *
 * Every call returns an hrtError_t and never lets a C++ exception escape; a failing call
 * records its code and message as hostrt.h's calls do (hrtGetLastError,
 * hrtPeekAtLastError, hrtGetLastErrorMessage).
 *
 * Streams: a handle must be live and of the pool's device (hrtErrorWrongDevice otherwise).
 * NULL is the default stream of the pool's device (for hrtPoolCreate and hrtMallocAsync: of
 * the current device). A stream may be destroyed while a block allocated on it is held, as in
 * CUDA: its queued work still runs and a later free still waits for it. hrtPoolMalloc allocates
 * without a home stream; hrtPoolFree is the synchronous free.
 *
 * hrtDeviceReset closes the device: its pools (the default one included) refuse allocations
 * with hrtErrorDeviceLost from then on, but their blocks stay valid, and frees (with NULL or
 * a stream of that device, or none), trims, statistics and hrtPoolDestroy keep working, so
 * the statistics still add up. The next call that needs the device opens a new one, with a
 * new default pool.
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

/*
 * Pool properties. `size` makes the struct extensible: set it to sizeof(hrtPoolProps) (fields
 * added later go at the end, and a caller built against an older header passes its smaller
 * size, the missing fields taking their defaults). With size 0 (a zero-initialised struct from
 * before the field existed), zero means "the default" for every field, retainBytes
 * included (keep everything); with size set, retainBytes is taken as is: 0 returns every
 * idle segment, SIZE_MAX keeps all.
 *
 * retainBytes is not CUDA's release threshold (cudaMemPoolAttrReleaseThreshold, default 0,
 * applied at synchronization points; called releaseThreshold before hostrt 0.2): whenever a
 * segment becomes idle and the pool reserves more than retainBytes, idle segments go back to
 * the driver until it reserves no more (or none is idle). Keeping everything is the default
 * because a pinned segment costs a pin and a map to get back.
 */
typedef struct hrtPoolProps {
  size_t size;             /* sizeof(hrtPoolProps), or 0 (see above) */
  size_t maxBytes;         /* upper bound on reserved bytes; 0: none */
  size_t retainBytes;      /* reserved bytes kept when segments go idle (see below) */
  size_t threadCacheBytes; /* per-thread cache budget; 0: default (1 MiB) */
  int disableThreadCache;  /* nonzero: no per-thread caches */
  int syncOnFree;          /* nonzero: debug mode, frees wait for the device */
  int sharedLargeSegments; /* nonzero: blocks over 1 MiB share segments (fewer driver
                              calls when sizes drift, more memory; see PoolOptions) */
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
/*
 * The handle is gone at once (and the pool stops being its device's current pool). As
 * cudaMemPoolDestroy, blocks still allocated from it stay valid: copies may use them and
 * hrtFreeAsync frees them; the pool returns its memory once none is left allocated and the
 * device has finished with the freed ones (idle segments go back at once). It never waits for
 * the device. NULL is a no-op.
 */
hrtError_t hrtPoolDestroy(hrtPool_t pool);

hrtError_t hrtPoolMallocAsync(hrtPool_t pool, void** ptr, size_t size, hrtStream_t stream);
hrtError_t hrtPoolFreeAsync(hrtPool_t pool, void* ptr, hrtStream_t stream);
hrtError_t hrtPoolMalloc(hrtPool_t pool, void** ptr, size_t size); /* no home stream */
/* As cudaFree of stream-ordered memory: synchronizes the pool's device (every stream, as
 * hrtDeviceSynchronize; a failed job is returned and nothing is freed, and a retry frees),
 * then frees; the block is reusable at once unless another device with access used it (its
 * reuse then waits for that device's work). After hrtDeviceReset it frees on the block's home
 * stream without waiting, as hrtPoolFreeAsync. */
hrtError_t hrtPoolFree(hrtPool_t pool, void* ptr);
hrtError_t hrtPoolRecordStream(hrtPool_t pool, void* ptr, hrtStream_t stream);

hrtError_t hrtPoolReserve(hrtPool_t pool, size_t largeBytes, size_t smallBytes);
hrtError_t hrtPoolTrimTo(hrtPool_t pool, size_t keepBytes, size_t* releasedBytes /* may be NULL */);
hrtError_t hrtPoolSetRetainBytes(hrtPool_t pool, size_t bytes);
hrtError_t hrtPoolSynchronize(hrtPool_t pool);
hrtError_t hrtPoolGetStats(hrtPool_t pool, hrtPoolStats* stats);
/* Restarts the peak statistics from the current values (and the growth policy's high-water
 * mark of reserved bytes with them). */
hrtError_t hrtPoolResetPeakStats(hrtPool_t pool);

/*
 * Stream-ordered allocation from a device's pool, as cudaMallocAsync:
 * - hrtDeviceGetDefaultMemPool: the device's default pool (made on first use, default
 *   properties). It cannot be destroyed (hrtErrorInvalidValue). hrtDeviceReset destroys
 *   its handle (hrtErrorInvalidResourceHandle after); blocks still allocated from it stay
 *   valid and hrtFreeAsync frees them, and the pool goes once the last is back.
 * - hrtDeviceSetMemPool / hrtDeviceGetMemPool: the pool hrtMallocAsync uses for the device
 *   (the default pool unless set; a pool of another device is hrtErrorWrongDevice). A
 *   destroyed pool stops being the device's pool: the default one is again.
 * - hrtMallocAsync allocates from the current pool of the stream's device (NULL: the current
 *   device's default stream). hrtFreeAsync frees a block of any pool, stream-ordered on
 *   `stream` (NULL: the default stream of the pool's device); NULL ptr is a no-op.
 * `device` is an index as for hrtSetDevice.
 */
hrtError_t hrtDeviceGetDefaultMemPool(hrtPool_t* pool, int device);
hrtError_t hrtDeviceSetMemPool(int device, hrtPool_t pool);
hrtError_t hrtDeviceGetMemPool(hrtPool_t* pool, int device);
hrtError_t hrtMallocAsync(void** ptr, size_t size, hrtStream_t stream);
hrtError_t hrtFreeAsync(void* ptr, hrtStream_t stream);

/*
 * Pools serving several devices (cudaMemPoolSetAccess / cudaMemPoolGetAccess, one device
 * per call): with ProtReadWrite, streams of `device` may allocate from the pool, free and
 * record its blocks, and copy to and from them (the device imports the pool's segments at its
 * first copy); a block's reuse then waits for the work of every device that used it.
 * ProtNone revokes it (work already queued completes). The pool's own device always has
 * ProtReadWrite (revoking it is hrtErrorInvalidValue). ProtRead is hrtErrorNotSupported:
 * the driver cannot import a buffer read-only.
 */
typedef enum hrtMemAccessFlags {
  hrtMemAccessFlagsProtNone = 0,
  hrtMemAccessFlagsProtRead = 1,
  hrtMemAccessFlagsProtReadWrite = 3
} hrtMemAccessFlags;
hrtError_t hrtMemPoolSetAccess(hrtPool_t pool, int device, hrtMemAccessFlags flags);
hrtError_t hrtMemPoolGetAccess(hrtMemAccessFlags* flags, hrtPool_t pool, int device);

/*
 * Registration cache (hostrt::RegistrationCache): hrtHostRegister behind an interval index
 * with reference counts. Acquiring a range that lies inside one already registered through
 * the cache costs no ioctl, only a reference. Released ranges stay registered (idle) until
 * hrtRegCacheEvictIdle, the cache's destruction, or an acquire that overlaps them; an
 * acquire overlapping a range still acquired fails with hrtErrorHostMemoryAlreadyRegistered.
 * While acquired, the memory is registered memory for hrtMemcpyAsync and
 * hrtPointerGetAttributes. Calls on one cache may come from any thread.
 */
typedef struct hrtRegCache* hrtRegCache_t;

typedef struct hrtRegCacheStats {
  size_t registrations; /* distinct registered ranges (each one ioctl) */
  uint64_t hits;        /* acquires served without an ioctl */
  uint64_t misses;      /* acquires that registered */
} hrtRegCacheStats;

/* A cache on the device of `stream` (NULL: this thread's current device); flags as for
 * hrtHostRegister, applied to every registration the cache makes. */
hrtError_t hrtRegCacheCreate(hrtRegCache_t* cache, hrtStream_t stream, unsigned int flags);
/* Releases what is still acquired and unregisters everything. NULL is a no-op. The caller
 * must have synchronized the copies that use the memory, as for hrtHostUnregister. */
hrtError_t hrtRegCacheDestroy(hrtRegCache_t cache);
hrtError_t hrtRegCacheAcquire(hrtRegCache_t cache, void* ptr, size_t size);
/* Drops one acquire of exactly (ptr, size); hrtErrorInvalidValue if there is none. */
hrtError_t hrtRegCacheRelease(hrtRegCache_t cache, void* ptr, size_t size);
hrtError_t hrtRegCacheEvictIdle(hrtRegCache_t cache, size_t* evicted /* may be NULL */);
hrtError_t hrtRegCacheGetStats(hrtRegCache_t cache, hrtRegCacheStats* stats);

#ifdef __cplusplus
}
#endif

#endif /* HOSTRT_HOSTRT_POOL_H_ */
