// hostrt's one exception hierarchy. Every error carries the errno that best describes it
// (positive, as in <cerrno>) and a message saying what was being done and where.
//
// Rules: functions throw these (never anything else on purpose, except std::bad_alloc);
// destructors never throw; the C API (hostrt.h) turns them into hrtError_t codes.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hostrt {

class Error : public std::runtime_error {
 public:
  Error(int err, const std::string& message);
  // Positive errno (EINVAL, ENOMEM, ENODEV, EIO ...).
  int error_code() const noexcept { return err_; }

 private:
  int err_;
};

// Memory could not be allocated, pinned or charged (ENOMEM, or EPERM/EAGAIN for memlock).
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// The device is gone, closed, or was never there (ENODEV, ENOENT for a missing node).
class DeviceLost : public Error {
 public:
  using Error::Error;
};

// A device, stream or pool opened before fork() used in the child (ECHILD). The child must
// open its own; releases of the parent's objects are left undone in the child.
class UsedAfterFork : public DeviceLost {
 public:
  using DeviceLost::DeviceLost;
};

// The caller passed something wrong: bad pointer, size, range, flags, stream (EINVAL...).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// host_register on a range that overlaps memory hostrt already knows (EEXIST).
class AlreadyRegistered : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// The backend or driver does not implement this (EOPNOTSUPP, ENOTTY from an older driver).
class NotSupported : public Error {
 public:
  using Error::Error;
};

// Work already submitted failed on the device; reported by the next synchronize/query that
// covers it. error_code() is the job's errno (EIO, ETIMEDOUT, ECANCELED ...).
class DeviceFault : public Error {
 public:
  DeviceFault(int err, const std::string& message, std::uint64_t seqno)
      : Error(err, message), seqno_(seqno) {}
  // The failed job's sequence number on its stream.
  std::uint64_t seqno() const noexcept { return seqno_; }

 private:
  std::uint64_t seqno_;
};

// Throws the subclass that matches a (positive) errno, with "context: strerror" as message.
[[noreturn]] void throw_errno(int err, const std::string& context);

}  // namespace hostrt
