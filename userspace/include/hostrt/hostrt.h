/*
 * hostrt C API: pinned host memory, streams, events and async copies for edu_accel, in the
 * style of cudaHostAlloc / aclrtMallocHost. Every call returns an hrtError_t and never lets a
 * C++ exception escape. A failing call also records, per thread, its code and a message
 * naming the call and the cause: hrtGetLastError() returns and clears the code,
 * hrtPeekAtLastError() returns it, hrtGetLastErrorMessage() gives the text.
 *
 * Devices: the backend comes from the environment at each device open:
 * HOSTRT_BACKEND=emulated selects the in-process emulation, anything else (or unset) the
 * edu_accel driver. Each thread has a current device (hrtSetDevice, default 0), opened on
 * first use; calls check it is still open (hrtDeviceReset closes it) before doing anything.
 *
 * Device memory is edu's 4096-byte buffer: hrtDevicePtr(offset) gives the address to pass
 * as dst (H2D) or src (D2H) of hrtMemcpyAsync; transfers must end at or before byte 4095.
 *
 * Frees: hrtFreeHost is cudaFreeHost: it first waits for the work queued on every stream of
 * the device (hrtDeviceSynchronize, which may report a failed job), then frees.
 * hrtFreeHostNoWait frees at once: jobs already submitted keep the memory valid for the device
 * until they end, but work queued earlier may still be running when it returns.
 * hrtHostUnregister is immediate in the same sense as hrtFreeHostNoWait.
 * Pageable memory passed to hrtMemcpyAsync is staged through pinned buffers; a pageable
 * destination makes the call wait for the copy.
 */
#ifndef HOSTRT_HOSTRT_H_
#define HOSTRT_HOSTRT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hrtError {
  hrtSuccess = 0,
  hrtErrorInvalidValue = 1,     /* bad pointer, size, range, flags, kind */
  hrtErrorMemoryAllocation = 2, /* the driver could not allocate or pin (RLIMIT_MEMLOCK...) */
  hrtErrorNoDevice = 3,         /* no device of the selected backend */
  hrtErrorInvalidDevice = 4,    /* device index out of range */
  hrtErrorDeviceLost = 5,       /* the device was closed (hrtDeviceReset) or vanished */
  hrtErrorNotReady = 6,         /* query: work still pending (not recorded as an error) */
  hrtErrorHostMemoryAlreadyRegistered = 7,
  hrtErrorHostMemoryNotRegistered = 8,
  hrtErrorInvalidResourceHandle = 9, /* destroyed or unknown stream / event */
  hrtErrorLaunchFailure = 10,        /* submitted work failed on the device */
  hrtErrorNotSupported = 11,
  hrtErrorUsedAfterFork = 12,    /* a device or pool opened before fork() used in the child */
  hrtErrorWrongDevice = 13,      /* a stream or pool used with an object of another device */
  hrtErrorPermissionDenied = 14, /* a high-priority stream without CAP_SYS_NICE */
  hrtErrorUnknown = 999
} hrtError_t;

typedef enum hrtMemcpyKind {
  hrtMemcpyHostToDevice = 1,
  hrtMemcpyDeviceToHost = 2,
  hrtMemcpyHostToHost = 3
} hrtMemcpyKind;

typedef enum hrtMemoryType {
  hrtMemoryTypePageable = 0,
  hrtMemoryTypePinned = 1,     /* hrtMallocHost / hrtHostAlloc */
  hrtMemoryTypeRegistered = 2, /* hrtHostRegister */
  hrtMemoryTypeDevice = 3,     /* hrtDevicePtr */
  hrtMemoryTypeImported = 4    /* hrtImportDmaBuf */
} hrtMemoryType;

typedef struct hrtPointerAttributes {
  hrtMemoryType type;
  int device; /* -1 for pageable memory */
  uint32_t handle;
  void* base;
  size_t size;
  size_t offset;
  int portable; /* 1: usable by every device (hrtHostAllocPortable / hrtHostRegisterPortable) */
} hrtPointerAttributes;

/*
 * NULL is the current device's default stream, with the semantics of CUDA's legacy default
 * stream: work queued on it (a copy, an event record, a host function, hrtMemcpy) runs after
 * all work queued earlier on the device's blocking streams, and work queued on a blocking
 * stream runs after all work queued earlier on it; hrtStreamSynchronize(NULL) and
 * hrtStreamQuery(NULL) cover the blocking streams' earlier work too. Host functions are work
 * of their stream (waited for on the host: the device cannot wait for them). Streams made
 * with hrtStreamNonBlocking take no part. As CUDA's, the order is between streams of one device;
 * stream-ordered frees (hrtFreeAsync) are not ordered by it (a copy records its use of a
 * pool block, so a block is never reused early either way).
 */
typedef struct hrtStream* hrtStream_t;
typedef struct hrtEvent* hrtEvent_t;

/* hrtHostAlloc flags (CUDA's values). Portable: every device may copy to and from the memory,
 * not only the current one; another device's first copy naming it gives that device its
 * own handle to the same pages (a dma-buf import), released by hrtFreeHost, which then
 * waits for those devices' streams too. Mapped and WriteCombined:
 * hrtErrorNotSupported (no device-side mapping of host memory; BOs are write-back). */
#define hrtHostAllocDefault 0u
#define hrtHostAllocPortable 1u
#define hrtHostAllocMapped 2u
#define hrtHostAllocWriteCombined 4u
/* hrtHostRegister flags. Unlike CUDA (Portable 1, ReadOnly 8), ReadOnly is 1 and Portable 2:
 * use the names. Portable: as for hrtHostAlloc; each other device registers (pins and
 * charges to RLIMIT_MEMLOCK) the range itself at its first copy naming it. */
#define hrtHostRegisterDefault 0u
#define hrtHostRegisterReadOnly 1u /* the device only reads the range */
#define hrtHostRegisterPortable 2u

/* Devices */
hrtError_t hrtGetDeviceCount(int* count);
hrtError_t hrtSetDevice(int device);
hrtError_t hrtGetDevice(int* device);
hrtError_t hrtDeviceSynchronize(void);
/* Closes the current device: its streams and events fail with hrtErrorDeviceLost, its host
 * memory can still be freed. Its pools (hostrt_pool.h, the default one included) refuse
 * allocations with hrtErrorDeviceLost; their blocks stay valid and can still be freed. The
 * next call that needs the device opens it again. */
hrtError_t hrtDeviceReset(void);
/* A raw capability (enum drm_edu_accel_param) of the current device. */
hrtError_t hrtDeviceGetParam(uint64_t* value, uint32_t param);
/* The address of byte `offset` of the device buffer, for hrtMemcpyAsync. */
void* hrtDevicePtr(size_t offset);

/* Pinned host memory */
hrtError_t hrtMallocHost(void** ptr, size_t size);
hrtError_t hrtHostAlloc(void** ptr, size_t size, unsigned int flags); /* hrtHostAlloc* flags */
/* NULL is a no-op for the three. A failure of the wait (a failed job) is returned, and the
 * memory is freed all the same (as cudaFreeHost). */
hrtError_t hrtFreeHost(void* ptr);       /* waits for the device's streams first */
hrtError_t hrtFreeHostNoWait(void* ptr); /* at once (see above) */
hrtError_t hrtFreeHostSync(
    void* ptr); /* hrtFreeHost, by its name before 0.2 (when hrtFreeHost did not wait) */
hrtError_t hrtHostRegister(void* ptr, size_t size, unsigned int flags);
hrtError_t hrtHostUnregister(void* ptr);
hrtError_t hrtPointerGetAttributes(hrtPointerAttributes* attributes, const void* ptr);
/* dma-buf sharing (the driver only; hrtErrorNotSupported on the emulated backend).
 * hrtImportDmaBuf: another driver's or device's dma-buf as memory of the current device,
 * mapped at *ptr (*size bytes), freed with hrtFreeHost; the caller keeps and closes fd.
 * hrtExportDmaBuf: the buffer starting at ptr (hrtHostAlloc, hrtHostRegister or an import)
 * as a new dma-buf fd the caller closes; its pages stay pinned while any importer holds them. */
hrtError_t hrtImportDmaBuf(int fd, void** ptr, size_t* size);
hrtError_t hrtExportDmaBuf(const void* ptr, int* fd);

/* Streams */
#define hrtStreamDefault 0u
#define hrtStreamNonBlocking 1u                  /* not ordered with the NULL stream (CUDA's value) */
hrtError_t hrtStreamCreate(hrtStream_t* stream); /* blocking, at the default priority (0) */
hrtError_t hrtStreamCreateWithFlags(hrtStream_t* stream, unsigned int flags);
/* hrtStreamDefault or hrtStreamNonBlocking; NULL: the default stream's (hrtStreamDefault). */
hrtError_t hrtStreamGetFlags(hrtStream_t stream, unsigned int* flags);
/* A stream of the given priority (cudaStreamCreateWithPriority). As in CUDA a lower number
 * is a higher priority: hrtDeviceGetStreamPriorityRange gives the range, [-1, 1] (-1 high,
 * 0 normal, the default, 1 low); a priority outside it is clamped to it. When several
 * streams of the device (of any process) have work ready to run, the device takes the
 * highest priority's first, the oldest first among equals. Priority orders only work still
 * waiting for the engine: a running job is never preempted, and the jobs the driver already
 * handed to the engine (up to 8) run first whatever their priority. It is a scheduling
 * preference, never an ordering between streams (use events for that). flags as for
 * hrtStreamCreateWithFlags.
 * A high priority needs CAP_SYS_NICE: hrtErrorPermissionDenied without it. */
hrtError_t hrtStreamCreateWithPriority(hrtStream_t* stream, unsigned int flags, int priority);
/* The priority a stream was created with (after clamping); NULL: the default stream's (0). */
hrtError_t hrtStreamGetPriority(hrtStream_t stream, int* priority);
/* The range of stream priorities: *leastPriority = 1 (low), *greatestPriority = -1 (high),
 * the same for every device. Either pointer may be NULL. */
hrtError_t hrtDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority);
hrtError_t hrtStreamDestroy(hrtStream_t stream);
hrtError_t hrtStreamSynchronize(hrtStream_t stream);
hrtError_t hrtStreamQuery(hrtStream_t stream); /* hrtSuccess or hrtErrorNotReady */
hrtError_t hrtStreamWaitEvent(hrtStream_t stream, hrtEvent_t event, unsigned int flags);
hrtError_t hrtMemcpyAsync(void* dst, const void* src, size_t count, hrtMemcpyKind kind, hrtStream_t stream);
/* cudaLaunchHostFunc: fn(userData) runs on a runtime thread once the work queued on the stream
 * before it has ended, in launch order. Work after it is held back on the host: the next call
 * ordering work on the stream (hrtMemcpyAsync, hrtEventRecord, hrtFreeAsync,
 * hrtStreamSynchronize, hrtDeviceSynchronize) waits until fn has returned; hrtStreamQuery says
 * hrtErrorNotReady meanwhile. fn must not call hostrt on its own stream (hrtErrorInvalidValue:
 * it would wait for itself); hrtStreamDestroy waits for the functions queued on the stream. */
typedef void (*hrtHostFn_t)(void* userData);
hrtError_t hrtLaunchHostFunc(hrtStream_t stream, hrtHostFn_t fn, void* userData);
/* hrtMemcpyAsync on the default stream, then waits for it. */
hrtError_t hrtMemcpy(void* dst, const void* src, size_t count, hrtMemcpyKind kind);

/* Events. hrtEventCreate's events time (as CUDA's): recording one on a busy stream costs two
 * ioctls; create events used only to order or wait with hrtEventDisableTiming.
 * hrtEventBlockingSync is accepted and changes nothing: synchronization never spins. */
#define hrtEventDefault 0u
#define hrtEventBlockingSync 1u
#define hrtEventDisableTiming 2u
#define hrtEventInterprocess 4u /* hrtErrorNotSupported */
hrtError_t hrtEventCreate(hrtEvent_t* event);
hrtError_t hrtEventCreateWithFlags(hrtEvent_t* event, unsigned int flags);
hrtError_t hrtEventDestroy(hrtEvent_t event);
hrtError_t hrtEventRecord(hrtEvent_t event, hrtStream_t stream);
hrtError_t hrtEventQuery(hrtEvent_t event); /* hrtSuccess or hrtErrorNotReady */
hrtError_t hrtEventSynchronize(hrtEvent_t event);
/* Milliseconds from when the stream reached `start` to when it reached `end` (negative if end
 * came first): the device's completion times, as the driver's fences recorded them (see
 * hostrt::Event). hrtErrorNotReady while either has not completed; hrtErrorInvalidResourceHandle
 * for an event never recorded or created with hrtEventDisableTiming. */
hrtError_t hrtEventElapsedTime(float* ms, hrtEvent_t start, hrtEvent_t end);

/* Errors */
const char* hrtGetErrorName(hrtError_t error);
const char* hrtGetErrorString(hrtError_t error);
hrtError_t hrtGetLastError(void);    /* returns this thread's last error and resets it */
hrtError_t hrtPeekAtLastError(void); /* returns it without resetting */
/* The message of this thread's last failing call ("" when none); valid until the next call. */
const char* hrtGetLastErrorMessage(void);

#ifdef __cplusplus
}
#endif

#endif /* HOSTRT_HOSTRT_H_ */
