// The C API under host-memory exhaustion: whichever allocation of a failing call fails (the
// error's message, the exception, the last error's text), the call still returns a status,
// never aborts, and the status is either the call's own or hrtErrorMemoryAllocation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "fail_nth_allocation.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

TEST(CApiAllocationFault, AFailingCallReportsItsStatusWhateverAllocationFails) {
  setenv("HOSTRT_BACKEND", "emulated", 1);
  SKIP_WITHOUT_DEVICE(Backend::Emulated);
  ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  bool own_status_without_message = false;
  for (long n = 0;; ++n) {
    hrtGetLastError();
    hrtError_t rc;
    bool fired;
    {
      FailNthAllocation f(n);
      // A copy of a NULL pointer: refused with a message naming the call.
      rc = hrtMemcpyAsync(hrtDevicePtr(0), nullptr, 100, hrtMemcpyHostToDevice, s);
      fired = f.fired();
    }
    const std::string msg = hrtGetLastErrorMessage();
    ASSERT_TRUE(rc == hrtErrorInvalidValue || rc == hrtErrorMemoryAllocation)
        << "allocation " << n << ": " << rc;
    EXPECT_EQ(hrtPeekAtLastError(), rc) << "allocation " << n;
    // The last allocation is the message's own: the status survives it, the text is empty.
    if (rc == hrtErrorInvalidValue && msg.empty()) own_status_without_message = true;
    if (!fired) {
      EXPECT_EQ(rc, hrtErrorInvalidValue);
      EXPECT_NE(msg.find("hrtMemcpyAsync"), std::string::npos) << msg;
      break;
    }
    ASSERT_LT(n, 50);
  }
  EXPECT_TRUE(own_status_without_message) << "no run failed the message's allocation";
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
}

}  // namespace
}  // namespace hostrt::test
