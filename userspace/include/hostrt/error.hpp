// hostrt's one exception hierarchy. Every error carries the errno that best describes it
// (positive, as in <cerrno>) and a message saying what was being done and where.
//
// Rules: functions throw these (never anything else on purpose, except std::bad_alloc for
// host memory); destructors never throw; the C API (hostrt.h) turns them into hrtError_t codes.
//
// Shape: hostrt::Error is a polymorphic mixin, not a std::exception itself; each concrete
// class derives from Error and from exactly one standard exception, so that
//   catch (const hostrt::Error&)   catches every hostrt error,
//   catch (const std::exception&)  catches every hostrt error, unambiguously (one base),
//   catch (const std::bad_alloc&)  catches OutOfMemory and PoolOutOfMemory (as
//                                  cudaMallocAsync's C++ wrappers and std::pmr expect).
// OutOfMemory derives from std::bad_alloc, the others from std::runtime_error. (An Error that
// was itself a std::exception could not also be a std::bad_alloc: libstdc++'s bad_alloc
// derives std::exception non-virtually, so the object would hold two std::exception bases and
// catch (std::exception&) would no longer match it.) Error::what() and the standard what() of
// every class return the same message.
#pragma once

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

namespace hostrt {

class Error {
 public:
  virtual ~Error() = default;
  // Positive errno (EINVAL, ENOMEM, ENODEV, EIO ...).
  int error_code() const noexcept { return err_; }
  // The message (the same as the std::exception base's what()).
  virtual const char* what() const noexcept { return message_.what(); }

 protected:
  Error(int err, const std::string& message) : err_(err), message_(message) {}
  Error(const Error&) = default;
  Error& operator=(const Error&) = default;

 private:
  int err_;
  std::runtime_error message_;  // reference-counted: copying an exception never throws
};

// An errno with no more specific class (a protocol violation by the driver, an internal
// inconsistency, an errno hostrt does not map).
class SystemError : public Error, public std::runtime_error {
 public:
  SystemError(int err, const std::string& message) : Error(err, message), std::runtime_error(message) {}
  const char* what() const noexcept override { return Error::what(); }
};

// Memory could not be allocated, pinned or charged (ENOMEM, or EPERM/EAGAIN for memlock).
// A std::bad_alloc (see the top of this file).
class OutOfMemory : public Error, public std::bad_alloc {
 public:
  OutOfMemory(int err, const std::string& message) : Error(err, message) {}
  const char* what() const noexcept override { return Error::what(); }
};

// The device is gone, closed, or was never there (ENODEV, ENOENT for a missing node).
class DeviceLost : public Error, public std::runtime_error {
 public:
  DeviceLost(int err, const std::string& message) : Error(err, message), std::runtime_error(message) {}
  const char* what() const noexcept override { return Error::what(); }
};

// A device, stream or pool opened before fork() used in the child (ECHILD). The child must
// open its own; releases of the parent's objects are left undone in the child.
class UsedAfterFork : public DeviceLost {
 public:
  using DeviceLost::DeviceLost;
};

// The caller passed something wrong: bad pointer, size, range, flags, stream (EINVAL...).
class InvalidArgument : public Error, public std::runtime_error {
 public:
  InvalidArgument(int err, const std::string& message) : Error(err, message), std::runtime_error(message) {}
  const char* what() const noexcept override { return Error::what(); }
};

// host_register on a range that overlaps memory hostrt already knows (EEXIST).
class AlreadyRegistered : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A stream, event or pool used with an object of another device (EXDEV): allocating from a
// pool on a stream of another device, freeing there.
class WrongDevice : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// The caller lacks a privilege the operation needs (EACCES): a high-priority stream without
// CAP_SYS_NICE (it would run ahead of every other process's work, as raising a CPU priority
// would). An InvalidArgument, so existing catch sites keep catching it; C:
// hrtErrorPermissionDenied.
class PermissionDenied : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// The backend or driver does not implement this (EOPNOTSUPP, ENOTTY from an older driver).
class NotSupported : public Error, public std::runtime_error {
 public:
  NotSupported(int err, const std::string& message) : Error(err, message), std::runtime_error(message) {}
  const char* what() const noexcept override { return Error::what(); }
};

// Work already submitted failed on the device; reported by the next synchronize/query that
// covers it. error_code() is the job's errno (EIO, ETIMEDOUT, ECANCELED ...).
class DeviceFault : public Error, public std::runtime_error {
 public:
  DeviceFault(int err, const std::string& message, std::uint64_t seqno)
      : Error(err, message), std::runtime_error(message), seqno_(seqno) {}
  const char* what() const noexcept override { return Error::what(); }
  // The failed job's sequence number on its stream.
  std::uint64_t seqno() const noexcept { return seqno_; }

 private:
  std::uint64_t seqno_;
};

// Throws the subclass that matches a (positive) errno, with "context: strerror" as message.
[[noreturn]] void throw_errno(int err, const std::string& context);

}  // namespace hostrt
