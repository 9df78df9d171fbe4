#include "hostrt/error.hpp"

#include <cerrno>
#include <cstring>

#include "hostrt/types.hpp"

namespace hostrt {

void throw_errno(int err, const std::string& context) {
  const std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ESTALE:  // SUBMIT naming a registration whose range changed under its pins
      throw InvalidArgument(err, context +
                                     ": the registered memory was unmapped or remapped after "
                                     "it was registered (its pins are not the range's pages any "
                                     "more); unregister it and register the range again");
    case ENOMEM:
    case EAGAIN:
    case EPERM:   // BO_USERPTR with RLIMIT_MEMLOCK of zero
    case ENOSPC:  // QUEUE_CREATE: every queue of the file in use
      throw OutOfMemory(err, msg);
    case ENODEV:
    case ENXIO:
      throw DeviceLost(err, msg);
    case EEXIST:
      throw AlreadyRegistered(err, msg);
    case EXDEV:
      throw WrongDevice(err, msg);
    case EACCES:  // QUEUE_CREATE at high priority without CAP_SYS_NICE
      throw PermissionDenied(err, msg);
    case EOPNOTSUPP:
    case ENOTTY:
    case ENOSYS:
      throw NotSupported(err, msg);
    case EINVAL:
    case EFAULT:
    case ERANGE:
    case E2BIG:
    case EMSGSIZE:
    case EBADF:
    case ENOENT:
    case EOVERFLOW:
      throw InvalidArgument(err, msg);
    default:
      throw SystemError(err, msg);
  }
}

const char* to_string(Backend b) noexcept { return b == Backend::Drm ? "drm" : "emulated"; }

const char* to_string(StreamPriority p) noexcept {
  switch (p) {
    case StreamPriority::High:
      return "high";
    case StreamPriority::Normal:
      return "normal";
    case StreamPriority::Low:
      return "low";
  }
  return "?";
}

const char* to_string(MemoryType t) noexcept {
  switch (t) {
    case MemoryType::Pageable:
      return "pageable";
    case MemoryType::Pinned:
      return "pinned";
    case MemoryType::Registered:
      return "registered";
    case MemoryType::Device:
      return "device";
    case MemoryType::Imported:
      return "imported";
  }
  return "?";
}

}  // namespace hostrt
