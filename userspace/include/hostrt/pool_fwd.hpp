// Declarations the pool's public headers share: the public classes they refer to and the
// internal ones their private members hold (defined in src/detail, never needed by users).
#pragma once

namespace hostrt {

class Device;
class Pool;
class PoolBuffer;
class Stream;

namespace detail {
class StreamCore;
class DeviceCore;
class AccessList;
struct Access;
}  // namespace detail

namespace detail::pool {
class PoolCore;
class SegmentSource;
class RegistrationIndex;
}  // namespace detail::pool

}  // namespace hostrt
