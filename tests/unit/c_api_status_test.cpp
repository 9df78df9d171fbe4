// The C API's one translation from C++ exceptions to status codes (capi::guarded, shared by
// every hrt* entry point): each class of hostrt::Error, the standard exceptions and anything
// else thrown becomes its documented code and this thread's last error, named after the call.
// Most of these cannot be provoked through a public call on demand (a device fault, an
// exception of a type hostrt never throws), so the table is tested where it is defined.
#include <functional>
#include <stdexcept>
#include <string>

#include "detail/c_api_support.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

struct Case {
  const char* name;
  std::function<void()> raise;
  hrtError_t code;
  const char* message;  // what the last error's message must contain after "hrtTestCall: "
};

[[noreturn]] void raise_int() { throw 42; }

TEST(CApiStatus, EveryExceptionBecomesItsStatusAndMessage) {
  using detail::capi::CError;
  const Case cases[] = {
      {"CError",
       [] {
         throw CError{hrtErrorInvalidResourceHandle, "stale handle"};
       },
       hrtErrorInvalidResourceHandle, "stale handle"},
      {"WrongDevice", [] { throw WrongDevice(EXDEV, "other device"); }, hrtErrorWrongDevice, "other device"},
      {"PermissionDenied", [] { throw PermissionDenied(EACCES, "not yours"); }, hrtErrorPermissionDenied,
       "not yours"},
      {"AlreadyRegistered", [] { throw AlreadyRegistered(EEXIST, "twice"); },
       hrtErrorHostMemoryAlreadyRegistered, "twice"},
      {"InvalidArgument", [] { throw InvalidArgument(EINVAL, "bad size"); }, hrtErrorInvalidValue,
       "bad size"},
      {"OutOfMemory", [] { throw OutOfMemory(ENOMEM, "memlock"); }, hrtErrorMemoryAllocation, "memlock"},
      {"UsedAfterFork", [] { throw UsedAfterFork(ECHILD, "in the child"); }, hrtErrorUsedAfterFork,
       "in the child"},
      {"DeviceLost", [] { throw DeviceLost(ENODEV, "unplugged"); }, hrtErrorDeviceLost, "unplugged"},
      {"DeviceFault", [] { throw DeviceFault(EIO, "job 7 failed", 7); }, hrtErrorLaunchFailure,
       "job 7 failed"},
      {"NotSupported", [] { throw NotSupported(EOPNOTSUPP, "no such flag"); }, hrtErrorNotSupported,
       "no such flag"},
      {"SystemError", [] { throw SystemError(EPROTO, "driver said nonsense"); }, hrtErrorUnknown,
       "driver said nonsense"},
      {"std::bad_alloc", [] { throw std::bad_alloc(); }, hrtErrorMemoryAllocation, "out of host memory"},
      {"std::exception", [] { throw std::length_error("vector too long"); }, hrtErrorUnknown,
       "vector too long"},
      {"int", raise_int, hrtErrorUnknown, "unknown exception"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    hrtGetLastError();
    const hrtError_t rc = detail::capi::guarded("hrtTestCall", [&]() -> hrtError_t {
      c.raise();
      return hrtSuccess;
    });
    EXPECT_EQ(rc, c.code);
    EXPECT_EQ(hrtPeekAtLastError(), c.code);
    EXPECT_EQ(std::string(hrtGetLastErrorMessage()), std::string("hrtTestCall: ") + c.message);
    EXPECT_EQ(hrtGetLastError(), c.code);
    EXPECT_EQ(hrtGetLastError(), hrtSuccess) << "reading the last error resets it";
  }
  // A body that returns its own status passes it through and leaves the last error alone.
  EXPECT_EQ(detail::capi::guarded("hrtTestCall", [] { return hrtErrorNotReady; }), hrtErrorNotReady);
  EXPECT_EQ(hrtPeekAtLastError(), hrtSuccess);
}

}  // namespace
}  // namespace hostrt::test
