// HOSTRT_TRACE=<file>: the runtime's own events (API calls, pool decisions, registration cache
// lookups) on CLOCK_MONOTONIC, the clock `make trace` gives the driver's tracepoints, so that
// scripts/trace-timeline.py can put both on one timeline. Written to <file> at exit (a forked
// child writes <file>.<pid>); Documentation/hostrt.md describes the format.
//
// Unset, an event costs one load of a flag that never changes and a predicted branch; the
// pool's warm paths carry not even that (a traced pool takes its slow paths, see PoolCore).
// Set, each thread appends to its own buffer: no lock, and no syscall (the clock is the vDSO's).
#pragma once

#include <cstdint>

namespace hostrt::detail::trace {

// The events, with what their four arguments hold (trace.cpp names them in the file).
enum class Kind : std::uint16_t {
  DeviceOpen,    // device index, client id (drm-client-id in fdinfo; 0: emulated), -, -
  StreamCreate,  // stream id, device index, driver queue id, client id
  ApiBegin,      // Api, stream id (or 0), bytes / other stream, copy kind / point
  ApiEnd,        // Api, -, -, -
  Copy,          // stream id, dst, src, bytes
  CopyPoints,    // stream id, first seqno, last seqno, copy kind
  PoolAlloc,     // addr, size, home stream id, Source
  PoolFree,      // addr, size, stream freed on, number of PoolFreeWait events that follow
  PoolFreeWait,  // addr, stream id, point, -
  PoolReusable,  // addr, size, -, -
  PoolTrim,      // bytes released, -, -, -
  RegHit,        // addr, bytes, registration start, -
  RegMiss,       // addr, bytes, -, -
  RegStale,      // registrations dropped, -, -, -
};

enum class Api : std::uint64_t {
  Memcpy,
  EventRecord,
  StreamWait,
  StreamSynchronize,
  EventSynchronize,
  DeviceSynchronize,
  PoolSynchronize,
};

// Where an allocated block came from.
enum class Source : std::uint64_t { ThreadCache, Arena, NewSegment };

namespace detail_ {
extern bool g_enabled;  // written once, before main, from HOSTRT_TRACE
}

inline bool enabled() noexcept { return __builtin_expect(detail_::g_enabled, false); }

void append(Kind k, std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) noexcept;

inline void emit(Kind k, std::uint64_t a = 0, std::uint64_t b = 0, std::uint64_t c = 0,
                 std::uint64_t d = 0) noexcept {
  if (enabled()) [[unlikely]]
    append(k, a, b, c, d);
}

// An API call's span on its thread's track.
class ApiSpan {
 public:
  explicit ApiSpan(Api api, std::uint64_t stream = 0, std::uint64_t bytes = 0,
                   std::uint64_t extra = 0) noexcept
      : api_(api) {
    emit(Kind::ApiBegin, static_cast<std::uint64_t>(api), stream, bytes, extra);
  }
  ApiSpan(const ApiSpan&) = delete;
  ApiSpan& operator=(const ApiSpan&) = delete;
  ~ApiSpan() { emit(Kind::ApiEnd, static_cast<std::uint64_t>(api_)); }

 private:
  Api api_;
};

// What HOSTRT_TRACE=path does when the library loads, for tests: call it in a process with
// one thread (a fork child) before it makes a pool or a device.
void start(const char* path);
// Writes the file now (also done at exit); for tests.
void flush() noexcept;

}  // namespace hostrt::detail::trace
