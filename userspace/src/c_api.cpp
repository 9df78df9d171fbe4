// The C API: thin wrappers over the C++ runtime. Each entry point runs its body inside
// guarded(), which turns exceptions into status codes and records the thread's last error.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#include "detail/access.hpp"
#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt.hpp"

namespace hostrt::detail::capi {

namespace {
thread_local hrtError_t t_last = hrtSuccess;
thread_local std::string t_message;
}  // namespace

hrtError_t fail(hrtError_t code, const char* fn, const char* what) noexcept {
  t_last = code;
  try {
    t_message = std::string(fn) + ": " + what;
  } catch (...) {
    t_message.clear();
  }
  return code;
}

}  // namespace hostrt::detail::capi

namespace {

using hostrt::Backend;
using hostrt::detail::capi::CError;
using hostrt::detail::capi::expect;
using hostrt::detail::capi::guarded;
using hostrt::detail::capi::t_last;
using hostrt::detail::capi::t_message;

thread_local int t_device = 0;

Backend selected_backend() {
  const char* b = std::getenv("HOSTRT_BACKEND");
  return b && std::strcmp(b, "emulated") == 0 ? Backend::Emulated : Backend::Drm;
}

// Process-wide state. Never destroyed: static destructors must not race threads still
// using the API, and nothing here needs a destructor to run at exit.
struct State {
  struct Dev {
    std::shared_ptr<hostrt::Device> device;
    // Shared with the pools of the device (their NULL stream), which may outlive a reset.
    std::shared_ptr<hrtStream> default_stream;
  };
  std::mutex m;
  std::map<std::pair<Backend, int>, Dev> devices;
  std::map<void*, hostrt::PinnedBuffer> allocations;  // hrtMallocHost / hrtHostAlloc
  std::map<void*, hostrt::PinnedBuffer> registrations;
  // Bumped (under m) whenever a device entry goes, so that the NULL-stream cache of every
  // thread (below) misses from then on.
  std::atomic<std::uint64_t> epoch{1};
};

State& state() {
  static State* s = new State;
  return *s;
}

// Device `index` of the selected backend, opened on first use; DeviceLost once closed.
State::Dev& device_locked(State& st, int index) {
  const Backend b = selected_backend();
  auto key = std::make_pair(b, index);
  auto it = st.devices.find(key);
  if (it == st.devices.end()) {
    const std::size_t n = hostrt::Device::count(b);
    expect(n > 0, hrtErrorNoDevice, std::string("no ") + hostrt::to_string(b) + " device");
    expect(index >= 0 && static_cast<std::size_t>(index) < n, hrtErrorInvalidDevice,
           "device " + std::to_string(index) + " of " + std::to_string(n));
    State::Dev d;
    d.device = std::make_shared<hostrt::Device>(hostrt::Device::open(static_cast<std::size_t>(index), b));
    it = st.devices.emplace(key, std::move(d)).first;
  }
  expect(it->second.device->is_open(), hrtErrorDeviceLost, "device " + std::to_string(index) + " is closed");
  return it->second;
}

// The current device of this thread.
State::Dev& current_locked(State& st) { return device_locked(st, t_device); }

// The NULL stream is CUDA's legacy default stream: ordered with the device's blocking streams
// (StreamCore::Ordering).
std::shared_ptr<hrtStream>& default_stream_locked(State::Dev& d) {
  if (!d.default_stream) {
    auto h = std::make_shared<hrtStream>(hrtStream{d.device->create_stream()});
    const auto& core = hostrt::detail::Access::core(h->stream);
    core->set_ordering(hostrt::detail::StreamCore::Ordering::Legacy);
    hostrt::detail::Access::core(*d.device)->set_legacy_stream(core);
    d.default_stream = std::move(h);
  }
  return d.default_stream;
}

}  // namespace

std::shared_ptr<hostrt::Device> hostrt::detail::capi::current_device() {
  auto& st = state();
  std::lock_guard lk(st.m);
  return current_locked(st).device;
}

std::shared_ptr<hostrt::Device> hostrt::detail::capi::device_at(int index) {
  auto& st = state();
  std::lock_guard lk(st.m);
  return device_locked(st, index).device;
}

std::shared_ptr<hrtStream> hostrt::detail::capi::default_stream_of(const hostrt::detail::DeviceCore* device) {
  auto& st = state();
  std::lock_guard lk(st.m);
  for (auto& [key, d] : st.devices)
    if (hostrt::detail::Access::core(*d.device).get() == device && d.device->is_open())
      return default_stream_locked(d);
  return nullptr;
}

namespace {
// What NULL meant to this thread's last call: the default stream of (backend, device) while
// no device entry has gone since (State::epoch). The State entry keeps the stream alive.
struct NullStreamCache {
  std::uint64_t epoch = 0;
  Backend backend = Backend::Drm;
  int device = -1;
  hostrt::Stream* stream = nullptr;
};
thread_local NullStreamCache t_null;
}  // namespace

hostrt::Stream& hostrt::detail::capi::stream_of(hrtStream_t s) {
  if (s != nullptr) return handle_object(s, "NULL stream", "unknown or destroyed stream").stream;
  auto& st = state();
  const Backend b = selected_backend();
  if (t_null.epoch == st.epoch.load(std::memory_order_acquire) && t_null.device == t_device &&
      t_null.backend == b)
    return *t_null.stream;
  std::lock_guard lk(st.m);
  hostrt::Stream& stream = default_stream_locked(current_locked(st))->stream;
  t_null = {st.epoch.load(std::memory_order_relaxed), b, t_device, &stream};
  return stream;
}

namespace {

using hostrt::detail::capi::current_device;
using hostrt::detail::capi::stream_of;

hrtEvent* event_of(hrtEvent_t e) {
  hrtEvent* obj = hostrt::detail::capi::HandleRegistry::instance().find(e);
  expect(obj != nullptr, hrtErrorInvalidResourceHandle, "unknown or destroyed event");
  return obj;
}

// A C caller may pass any int in an enum; reading it as the C++ enum type would be UB for
// values outside the enumerators' range, so the bits are read as the underlying type.
hostrt::CopyKind kind_of(const hrtMemcpyKind& kind) {
  std::underlying_type_t<hrtMemcpyKind> k;
  static_assert(sizeof k == sizeof kind);
  std::memcpy(&k, &kind, sizeof k);
  expect(k == hrtMemcpyHostToDevice || k == hrtMemcpyDeviceToHost || k == hrtMemcpyHostToHost,
         hrtErrorInvalidValue, "unknown memcpy kind " + std::to_string(k));
  return static_cast<hostrt::CopyKind>(k);
}

// Any int a C caller put in the enum, read without assuming it is an enumerator.
int code_of(const hrtError_t& e) noexcept {
  std::underlying_type_t<hrtError_t> c;
  static_assert(sizeof c == sizeof e);
  std::memcpy(&c, &e, sizeof c);
  return static_cast<int>(c);
}

hrtError_t create_stream(hrtStream_t* stream, unsigned flags, hostrt::StreamPriority priority) {
  expect(stream != nullptr, hrtErrorInvalidValue, "stream is NULL");
  expect((flags & ~hrtStreamNonBlocking) == 0, hrtErrorInvalidValue,
         "unknown stream flags " + std::to_string(flags));
  auto dev = current_device();
  auto h = std::make_unique<hrtStream>(hrtStream{dev->create_stream(priority)});
  if (flags & hrtStreamNonBlocking)
    hostrt::detail::Access::core(h->stream)->set_ordering(hostrt::detail::StreamCore::Ordering::NonBlocking);
  *stream = hostrt::detail::capi::HandleRegistry::instance().add(std::move(h));
  return hrtSuccess;
}

// The stream of a call that queues work on it (a copy, an event record, a host function), with
// the legacy default stream's implicit order queued first (StreamCore::order_implicitly).
hostrt::Stream& ordered_stream(hrtStream_t s) {
  hostrt::Stream& stream = stream_of(s);
  if (const auto& core = hostrt::detail::Access::core(stream)) core->order_implicitly();
  return stream;
}

// The stream of a synchronize or query: the NULL stream covers the blocking streams' work
// queued so far; a blocking stream's own work already carries what it follows (waiting for
// the NULL stream's later work as well would only make it wait longer).
hostrt::Stream& observed_stream(hrtStream_t s) {
  hostrt::Stream& stream = stream_of(s);
  if (const auto& core = hostrt::detail::Access::core(stream);
      core && core->ordering() == hostrt::detail::StreamCore::Ordering::Legacy)
    core->order_implicitly();
  return stream;
}

hrtError_t alloc_host(void** ptr, size_t size, unsigned flags) {
  expect(ptr != nullptr, hrtErrorInvalidValue, "ptr is NULL");
  expect((flags & (hrtHostAllocMapped | hrtHostAllocWriteCombined)) == 0, hrtErrorNotSupported,
         "hrtHostAllocMapped / hrtHostAllocWriteCombined: edu has no device-side mapping of host memory "
         "and the driver maps BOs write-back");
  expect((flags & ~hrtHostAllocPortable) == 0, hrtErrorInvalidValue,
         "unknown flags " + std::to_string(flags));
  auto dev = current_device();
  hostrt::PinnedBuffer b =
      dev->host_alloc(size, flags & hrtHostAllocPortable ? hostrt::kHostAllocPortable : 0u);
  void* p = b.data();
  auto& st = state();
  std::lock_guard lk(st.m);
  st.allocations.emplace(p, std::move(b));
  *ptr = p;
  return hrtSuccess;
}

hrtError_t free_host(void* ptr, bool sync) {
  if (!ptr) return hrtSuccess;
  auto& st = state();
  hostrt::PinnedBuffer b;
  {
    std::lock_guard lk(st.m);
    auto it = st.allocations.find(ptr);
    expect(it != st.allocations.end(), hrtErrorInvalidValue, "pointer was not returned by hrtMallocHost");
    b = std::move(it->second);
    st.allocations.erase(it);
  }
  if (sync) hostrt::free_host_sync(std::move(b));
  return hrtSuccess;
}

}  // namespace

extern "C" {

hrtError_t hrtGetDeviceCount(int* count) {
  return guarded(__func__, [&] {
    expect(count != nullptr, hrtErrorInvalidValue, "count is NULL");
    *count = static_cast<int>(hostrt::Device::count(selected_backend()));
    return hrtSuccess;
  });
}

hrtError_t hrtSetDevice(int device) {
  return guarded(__func__, [&] {
    const std::size_t n = hostrt::Device::count(selected_backend());
    expect(device >= 0 && static_cast<std::size_t>(device) < n, hrtErrorInvalidDevice,
           "device " + std::to_string(device) + " of " + std::to_string(n));
    t_device = device;
    return hrtSuccess;
  });
}

hrtError_t hrtGetDevice(int* device) {
  return guarded(__func__, [&] {
    expect(device != nullptr, hrtErrorInvalidValue, "device is NULL");
    *device = t_device;
    return hrtSuccess;
  });
}

hrtError_t hrtDeviceSynchronize(void) {
  return guarded(__func__, [&] {
    current_device()->synchronize();
    return hrtSuccess;
  });
}

hrtError_t hrtDeviceReset(void) {
  return guarded(__func__, [&] {
    auto& st = state();
    State::Dev d;
    {
      std::lock_guard lk(st.m);
      auto it = st.devices.find({selected_backend(), t_device});
      if (it == st.devices.end()) return hrtSuccess;
      d = std::move(it->second);
      st.devices.erase(it);
      st.epoch.fetch_add(1, std::memory_order_acq_rel);
    }
    d.device->close();
    hostrt::detail::capi::device_reset_pools(*d.device);
    return hrtSuccess;
  });
}

hrtError_t hrtDeviceGetParam(uint64_t* value, uint32_t param) {
  return guarded(__func__, [&] {
    expect(value != nullptr, hrtErrorInvalidValue, "value is NULL");
    *value = current_device()->param(param);
    return hrtSuccess;
  });
}

void* hrtDevicePtr(size_t offset) { return hostrt::DevicePtr(offset).as_void(); }

hrtError_t hrtMallocHost(void** ptr, size_t size) {
  return guarded(__func__, [&] { return alloc_host(ptr, size, 0); });
}

hrtError_t hrtHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return guarded(__func__, [&] { return alloc_host(ptr, size, flags); });
}

hrtError_t hrtFreeHost(void* ptr) {
  return guarded(__func__, [&] { return free_host(ptr, true); });
}

hrtError_t hrtFreeHostNoWait(void* ptr) {
  return guarded(__func__, [&] { return free_host(ptr, false); });
}

hrtError_t hrtFreeHostSync(void* ptr) {
  return guarded(__func__, [&] { return free_host(ptr, true); });
}

hrtError_t hrtHostRegister(void* ptr, size_t size, unsigned int flags) {
  return guarded(__func__, [&] {
    static_assert(hrtHostRegisterReadOnly == hostrt::kHostRegisterReadOnly &&
                  hrtHostRegisterPortable == hostrt::kHostRegisterPortable);
    auto dev = current_device();
    hostrt::PinnedBuffer b = dev->host_register(ptr, size, flags);
    auto& st = state();
    std::lock_guard lk(st.m);
    st.registrations.emplace(ptr, std::move(b));
    return hrtSuccess;
  });
}

hrtError_t hrtHostUnregister(void* ptr) {
  return guarded(__func__, [&] {
    auto& st = state();
    hostrt::PinnedBuffer b;
    std::lock_guard lk(st.m);
    auto it = st.registrations.find(ptr);
    expect(it != st.registrations.end(), hrtErrorHostMemoryNotRegistered,
           "pointer is not the start of a range registered with hrtHostRegister");
    b = std::move(it->second);
    st.registrations.erase(it);
    return hrtSuccess;
  });
}

hrtError_t hrtImportDmaBuf(int fd, void** ptr, size_t* size) {
  return guarded(__func__, [&] {
    expect(ptr != nullptr && size != nullptr, hrtErrorInvalidValue, "ptr or size is NULL");
    hostrt::PinnedBuffer b = current_device()->import_dmabuf(fd);
    void* p = b.data();
    const std::size_t n = b.size();
    auto& st = state();
    std::lock_guard lk(st.m);
    st.allocations.emplace(p, std::move(b));
    *ptr = p;
    *size = n;
    return hrtSuccess;
  });
}

hrtError_t hrtExportDmaBuf(const void* ptr, int* fd) {
  return guarded(__func__, [&] {
    expect(fd != nullptr, hrtErrorInvalidValue, "fd is NULL");
    auto& st = state();
    std::lock_guard lk(st.m);
    void* key = const_cast<void*>(ptr);
    const hostrt::PinnedBuffer* b = nullptr;
    if (auto it = st.allocations.find(key); it != st.allocations.end()) b = &it->second;
    if (auto it = st.registrations.find(key); it != st.registrations.end()) b = &it->second;
    expect(b != nullptr, hrtErrorInvalidValue,
           "pointer is not the start of hrtHostAlloc, hrtHostRegister or hrtImportDmaBuf memory");
    *fd = hostrt::export_dmabuf(*b).release();
    return hrtSuccess;
  });
}

hrtError_t hrtPointerGetAttributes(hrtPointerAttributes* attributes, const void* ptr) {
  return guarded(__func__, [&] {
    expect(attributes != nullptr, hrtErrorInvalidValue, "attributes is NULL");
    const auto a = hostrt::pointer_attributes(ptr);
    attributes->type = static_cast<hrtMemoryType>(a.type);
    attributes->device = a.device ? static_cast<int>(*a.device) : -1;
    attributes->handle = a.handle;
    attributes->base = a.base;
    attributes->size = a.size;
    attributes->offset = a.offset;
    attributes->portable = a.portable ? 1 : 0;
    return hrtSuccess;
  });
}

hrtError_t hrtStreamCreate(hrtStream_t* stream) {
  return guarded(__func__, [&] { return create_stream(stream, 0, hostrt::StreamPriority::Normal); });
}

hrtError_t hrtStreamCreateWithFlags(hrtStream_t* stream, unsigned int flags) {
  return guarded(__func__, [&] { return create_stream(stream, flags, hostrt::StreamPriority::Normal); });
}

hrtError_t hrtStreamGetFlags(hrtStream_t stream, unsigned int* flags) {
  return guarded(__func__, [&] {
    expect(flags != nullptr, hrtErrorInvalidValue, "flags is NULL");
    const auto& core = hostrt::detail::Access::core(stream_of(stream));
    expect(core != nullptr, hrtErrorInvalidResourceHandle, "destroyed stream");
    *flags = core->ordering() == hostrt::detail::StreamCore::Ordering::NonBlocking ? hrtStreamNonBlocking
                                                                                   : hrtStreamDefault;
    return hrtSuccess;
  });
}

hrtError_t hrtStreamCreateWithPriority(hrtStream_t* stream, unsigned int flags, int priority) {
  return guarded(__func__, [&] {
    // Clamped, as CUDA does: code written for a device with a wider range still runs.
    const int p = std::clamp(priority, static_cast<int>(hostrt::StreamPriority::High),
                             static_cast<int>(hostrt::StreamPriority::Low));
    return create_stream(stream, flags, static_cast<hostrt::StreamPriority>(p));
  });
}

hrtError_t hrtStreamGetPriority(hrtStream_t stream, int* priority) {
  return guarded(__func__, [&] {
    expect(priority != nullptr, hrtErrorInvalidValue, "priority is NULL");
    *priority = static_cast<int>(stream_of(stream).priority());
    return hrtSuccess;
  });
}

hrtError_t hrtDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  return guarded(__func__, [&] {
    if (leastPriority) *leastPriority = static_cast<int>(hostrt::StreamPriority::Low);
    if (greatestPriority) *greatestPriority = static_cast<int>(hostrt::StreamPriority::High);
    return hrtSuccess;
  });
}

hrtError_t hrtStreamDestroy(hrtStream_t stream) {
  return guarded(__func__, [&] {
    std::unique_ptr<hrtStream> owned = hostrt::detail::capi::HandleRegistry::instance().remove(stream);
    expect(owned != nullptr, hrtErrorInvalidResourceHandle, "unknown or destroyed stream");
    return hrtSuccess;
  });
}

hrtError_t hrtStreamSynchronize(hrtStream_t stream) {
  return guarded(__func__, [&] {
    observed_stream(stream).synchronize();
    return hrtSuccess;
  });
}

hrtError_t hrtStreamQuery(hrtStream_t stream) {
  return guarded(__func__, [&] { return observed_stream(stream).query() ? hrtSuccess : hrtErrorNotReady; });
}

hrtError_t hrtStreamWaitEvent(hrtStream_t stream, hrtEvent_t event, unsigned int flags) {
  return guarded(__func__, [&] {
    expect(flags == 0, hrtErrorInvalidValue, "flags must be 0");
    hostrt::Stream& s = stream_of(stream);
    s.wait(event_of(event)->event);
    return hrtSuccess;
  });
}

hrtError_t hrtMemcpyAsync(void* dst, const void* src, size_t count, hrtMemcpyKind kind, hrtStream_t stream) {
  return guarded(__func__, [&] {
    const auto k = kind_of(kind);
    ordered_stream(stream).memcpy_async(dst, src, count, k);
    return hrtSuccess;
  });
}

hrtError_t hrtLaunchHostFunc(hrtStream_t stream, hrtHostFn_t fn, void* userData) {
  return guarded(__func__, [&] {
    expect(fn != nullptr, hrtErrorInvalidValue, "fn is NULL");
    ordered_stream(stream).launch_host_func([fn, userData] { fn(userData); });
    return hrtSuccess;
  });
}

hrtError_t hrtMemcpy(void* dst, const void* src, size_t count, hrtMemcpyKind kind) {
  return guarded(__func__, [&] {
    const auto k = kind_of(kind);
    hostrt::Stream& s = ordered_stream(nullptr);
    s.memcpy_async(dst, src, count, k);
    s.synchronize();
    return hrtSuccess;
  });
}

hrtError_t hrtEventCreate(hrtEvent_t* event) { return hrtEventCreateWithFlags(event, hrtEventDefault); }

hrtError_t hrtEventCreateWithFlags(hrtEvent_t* event, unsigned int flags) {
  return guarded(__func__, [&] {
    expect(event != nullptr, hrtErrorInvalidValue, "event is NULL");
    expect(!(flags & hrtEventInterprocess), hrtErrorNotSupported,
           "hrtEventInterprocess: events cannot be shared between processes");
    expect((flags & ~(hrtEventBlockingSync | hrtEventDisableTiming)) == 0, hrtErrorInvalidValue,
           "unknown event flags " + std::to_string(flags));
    *event = hostrt::detail::capi::HandleRegistry::instance().add(
        std::make_unique<hrtEvent>(hrtEvent{hostrt::Event(static_cast<hostrt::EventFlags>(flags))}));
    return hrtSuccess;
  });
}

hrtError_t hrtEventDestroy(hrtEvent_t event) {
  return guarded(__func__, [&] {
    std::unique_ptr<hrtEvent> owned = hostrt::detail::capi::HandleRegistry::instance().remove(event);
    expect(owned != nullptr, hrtErrorInvalidResourceHandle, "unknown or destroyed event");
    return hrtSuccess;
  });
}

hrtError_t hrtEventRecord(hrtEvent_t event, hrtStream_t stream) {
  return guarded(__func__, [&] {
    hrtEvent_t e = event_of(event);
    e->event.record(ordered_stream(stream));
    return hrtSuccess;
  });
}

hrtError_t hrtEventQuery(hrtEvent_t event) {
  return guarded(__func__, [&] { return event_of(event)->event.query() ? hrtSuccess : hrtErrorNotReady; });
}

hrtError_t hrtEventSynchronize(hrtEvent_t event) {
  return guarded(__func__, [&] {
    event_of(event)->event.synchronize();
    return hrtSuccess;
  });
}

hrtError_t hrtEventElapsedTime(float* ms, hrtEvent_t start, hrtEvent_t end) {
  return guarded(__func__, [&] {
    expect(ms != nullptr, hrtErrorInvalidValue, "ms is NULL");
    const hostrt::Event& a = event_of(start)->event;
    const hostrt::Event& b = event_of(end)->event;
    for (const hostrt::Event* e : {&a, &b}) {
      const char* which = e == &a ? "start" : "end";
      expect(e->recorded(), hrtErrorInvalidResourceHandle, std::string(which) + " event was never recorded");
      expect(e->timing(), hrtErrorInvalidResourceHandle,
             std::string(which) + " event was created with hrtEventDisableTiming");
    }
    const auto d = hostrt::Event::elapsed(a, b);
    if (!d) return hrtErrorNotReady;
    *ms = static_cast<float>(static_cast<double>(d->count()) / 1e6);
    return hrtSuccess;
  });
}

const char* hrtGetErrorName(hrtError_t error) {
  switch (code_of(error)) {
    case hrtSuccess:
      return "hrtSuccess";
    case hrtErrorInvalidValue:
      return "hrtErrorInvalidValue";
    case hrtErrorMemoryAllocation:
      return "hrtErrorMemoryAllocation";
    case hrtErrorNoDevice:
      return "hrtErrorNoDevice";
    case hrtErrorInvalidDevice:
      return "hrtErrorInvalidDevice";
    case hrtErrorDeviceLost:
      return "hrtErrorDeviceLost";
    case hrtErrorNotReady:
      return "hrtErrorNotReady";
    case hrtErrorHostMemoryAlreadyRegistered:
      return "hrtErrorHostMemoryAlreadyRegistered";
    case hrtErrorHostMemoryNotRegistered:
      return "hrtErrorHostMemoryNotRegistered";
    case hrtErrorInvalidResourceHandle:
      return "hrtErrorInvalidResourceHandle";
    case hrtErrorLaunchFailure:
      return "hrtErrorLaunchFailure";
    case hrtErrorNotSupported:
      return "hrtErrorNotSupported";
    case hrtErrorUsedAfterFork:
      return "hrtErrorUsedAfterFork";
    case hrtErrorWrongDevice:
      return "hrtErrorWrongDevice";
    case hrtErrorPermissionDenied:
      return "hrtErrorPermissionDenied";
    case hrtErrorUnknown:
      return "hrtErrorUnknown";
  }
  return "unrecognized error code";
}

const char* hrtGetErrorString(hrtError_t error) {
  switch (code_of(error)) {
    case hrtSuccess:
      return "no error";
    case hrtErrorInvalidValue:
      return "invalid argument";
    case hrtErrorMemoryAllocation:
      return "out of memory (allocation or pinning refused)";
    case hrtErrorNoDevice:
      return "no device of the selected backend";
    case hrtErrorInvalidDevice:
      return "invalid device index";
    case hrtErrorDeviceLost:
      return "device closed or lost";
    case hrtErrorNotReady:
      return "work not completed yet";
    case hrtErrorHostMemoryAlreadyRegistered:
      return "part of the range is already registered or pinned";
    case hrtErrorHostMemoryNotRegistered:
      return "pointer not registered";
    case hrtErrorInvalidResourceHandle:
      return "invalid stream or event handle";
    case hrtErrorLaunchFailure:
      return "work failed on the device";
    case hrtErrorNotSupported:
      return "operation not supported";
    case hrtErrorUsedAfterFork:
      return "device or pool of the parent process used after fork()";
    case hrtErrorWrongDevice:
      return "stream or pool of another device";
    case hrtErrorPermissionDenied:
      return "permission denied (a high-priority stream needs CAP_SYS_NICE)";
    case hrtErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}

hrtError_t hrtGetLastError(void) {
  const hrtError_t e = t_last;
  t_last = hrtSuccess;
  return e;
}

hrtError_t hrtPeekAtLastError(void) { return t_last; }

const char* hrtGetLastErrorMessage(void) { return t_message.c_str(); }

}  // extern "C"
