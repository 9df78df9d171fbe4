// What every C entry point of hostrt shares (the runtime's in c_api.cpp, the pool's in
// src/pool/): the handle structs, exception-to-status translation, and the per-thread last
// error that hrtGetLastError / hrtPeekAtLastError / hrtGetLastErrorMessage report.
#pragma once

#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "detail/c_handles.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt.hpp"

struct hrtStream {
  hostrt::Stream stream;
};
struct hrtEvent {
  hostrt::Event event;
};

namespace hostrt::detail {
class DeviceCore;
}

namespace hostrt::detail::capi {

// A C-level failure with its status code decided already.
struct CError {
  hrtError_t code;
  std::string message;
};

// The C-string form builds no message unless the check fails (every entry point checks
// several things on its hot path).
inline void expect(bool cond, hrtError_t code, const char* msg) {
  if (!cond) [[unlikely]]
    throw CError{code, msg};
}
inline void expect(bool cond, hrtError_t code, const std::string& msg) {
  if (!cond) [[unlikely]]
    throw CError{code, msg};
}

// Records code and "fn: what" as this thread's last error; returns code. Takes C strings: it
// is called from catch handlers of noexcept functions, where building a std::string argument
// could throw std::bad_alloc past them (std::terminate); fail() itself allocates under a try.
hrtError_t fail(hrtError_t code, const char* fn, const char* what) noexcept;

// Runs body (returning hrtError_t); any exception becomes a status code and the last error.
template <class F>
hrtError_t guarded(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const CError& e) {
    return fail(e.code, fn, e.message.c_str());
  } catch (const WrongDevice& e) {
    return fail(hrtErrorWrongDevice, fn, e.what());
  } catch (const PermissionDenied& e) {  // before InvalidArgument, its base
    return fail(hrtErrorPermissionDenied, fn, e.what());
  } catch (const AlreadyRegistered& e) {
    return fail(hrtErrorHostMemoryAlreadyRegistered, fn, e.what());
  } catch (const InvalidArgument& e) {
    return fail(hrtErrorInvalidValue, fn, e.what());
  } catch (const OutOfMemory& e) {
    return fail(hrtErrorMemoryAllocation, fn, e.what());
  } catch (const UsedAfterFork& e) {
    return fail(hrtErrorUsedAfterFork, fn, e.what());
  } catch (const DeviceLost& e) {
    return fail(hrtErrorDeviceLost, fn, e.what());
  } catch (const DeviceFault& e) {
    return fail(hrtErrorLaunchFailure, fn, e.what());
  } catch (const NotSupported& e) {
    return fail(hrtErrorNotSupported, fn, e.what());
  } catch (const Error& e) {  // SystemError and any class without a code of its own
    return fail(hrtErrorUnknown, fn, e.what());
  } catch (const std::bad_alloc&) {
    return fail(hrtErrorMemoryAllocation, fn, "out of host memory");
  } catch (const std::exception& e) {
    return fail(hrtErrorUnknown, fn, e.what());
  } catch (...) {
    return fail(hrtErrorUnknown, fn, "unknown exception");
  }
}

// The object behind a C handle of kind T: hrtErrorInvalidValue for NULL,
// hrtErrorInvalidResourceHandle for anything not live (see detail/c_handles.hpp). No lock.
template <class T>
T& handle_object(T* handle, const char* null_message, const char* stale_message) {
  expect(handle != nullptr, hrtErrorInvalidValue, null_message);
  T* obj = HandleRegistry::instance().find(handle);
  expect(obj != nullptr, hrtErrorInvalidResourceHandle, stale_message);
  return *obj;
}

// The stream behind a handle: a live one (hrtErrorInvalidResourceHandle otherwise), or for
// NULL the current device's default stream.
Stream& stream_of(hrtStream_t s);
// This thread's current device, opened on first use; hrtErrorDeviceLost once reset.
std::shared_ptr<Device> current_device();
// Device `index` of the selected backend, opened on first use; hrtErrorDeviceLost once reset.
std::shared_ptr<Device> device_at(int index);
// The default (NULL) stream of an open device the C API has opened, made on first use;
// nullptr when the device was reset.
std::shared_ptr<hrtStream> default_stream_of(const DeviceCore* device);
// hrtDeviceReset, after closing the device: what becomes of its default pool's handle.
void device_reset_pools(Device& device) noexcept;

}  // namespace hostrt::detail::capi
