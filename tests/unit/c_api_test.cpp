// The C API on each backend (HOSTRT_BACKEND picks it, as for any C program).
#include <sys/mman.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "c_api_fixture.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class CApi : public CApiBackendTest {};

TEST_P(CApi, DevicesAndParams) {
  int n = -1;
  ASSERT_EQ(hrtGetDeviceCount(&n), hrtSuccess);
  EXPECT_GE(n, 1);
  int d = -1;
  EXPECT_EQ(hrtGetDevice(&d), hrtSuccess);
  EXPECT_EQ(d, 0);
  EXPECT_EQ(hrtSetDevice(n), hrtErrorInvalidDevice);
  EXPECT_EQ(hrtSetDevice(-1), hrtErrorInvalidDevice);
  std::uint64_t v = 0;
  EXPECT_EQ(hrtDeviceGetParam(&v, 3 /* DRM_EDU_ACCEL_PARAM_MAX_TRANSFER */), hrtSuccess);
  EXPECT_EQ(v, 4095u);
  EXPECT_EQ(hrtDeviceGetParam(&v, 0xdead), hrtErrorInvalidValue);
  EXPECT_EQ(hrtGetDeviceCount(nullptr), hrtErrorInvalidValue);
}

TEST_P(CApi, MallocHostFreeHostAndAttributes) {
  void* p = nullptr;
  ASSERT_EQ(hrtMallocHost(&p, 100), hrtSuccess);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  hrtPointerAttributes a{};
  ASSERT_EQ(hrtPointerGetAttributes(&a, static_cast<char*>(p) + 10), hrtSuccess);
  EXPECT_EQ(a.type, hrtMemoryTypePinned);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.base, p);
  EXPECT_EQ(a.size, 128u);
  EXPECT_EQ(a.offset, 10u);
  EXPECT_EQ(hrtFreeHost(p), hrtSuccess);
  ASSERT_EQ(hrtPointerGetAttributes(&a, p), hrtSuccess);
  EXPECT_EQ(a.type, hrtMemoryTypePageable);
  EXPECT_EQ(a.device, -1);
  EXPECT_EQ(hrtFreeHost(p), hrtErrorInvalidValue) << "double free must be caught";
  EXPECT_EQ(hrtFreeHost(nullptr), hrtSuccess);
  EXPECT_EQ(hrtMallocHost(nullptr, 64), hrtErrorInvalidValue);
  EXPECT_EQ(hrtMallocHost(&p, 0), hrtErrorInvalidValue);
  EXPECT_EQ(hrtHostAlloc(&p, 64, 8), hrtErrorInvalidValue);
  EXPECT_EQ(hrtHostAlloc(&p, 64, 5), hrtErrorNotSupported) << "portable | write-combined";
  ASSERT_EQ(hrtHostAlloc(&p, 64, 0), hrtSuccess);
  EXPECT_EQ(hrtFreeHostSync(p), hrtSuccess);
}

// The driver refuses a copy naming a registration whose range was unmapped under its pins
// (-ESTALE): the caller must register again. That reached C as hrtErrorUnknown ("Stale file
// handle"); it is a bad argument, with a message that says what to do.
TEST_P(CApi, ACopyFromAnUnmappedRegistrationIsInvalidValueWithAReason) {
  if (GetParam() == Backend::Emulated)
    GTEST_SKIP() << "the emulated backend does not watch registered ranges";
  const std::size_t ps = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  std::memset(m, 1, 2 * ps);
  ASSERT_EQ(hrtHostRegister(m, 2 * ps, 0), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(munmap(m, 2 * ps), 0);
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  EXPECT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), m, 64, hrtMemcpyHostToDevice, s), hrtErrorInvalidValue);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("register the range again"), std::string::npos)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtStreamSynchronize(s), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  EXPECT_EQ(hrtHostUnregister(m), hrtSuccess);
}

TEST_P(CApi, RegisterUnregisterAndDoubleRegistration) {
  std::vector<unsigned char> v(10000);
  ASSERT_EQ(hrtHostRegister(v.data(), v.size(), hrtHostRegisterDefault), hrtSuccess);
  hrtPointerAttributes a{};
  ASSERT_EQ(hrtPointerGetAttributes(&a, v.data() + 5), hrtSuccess);
  EXPECT_EQ(a.type, hrtMemoryTypeRegistered);
  EXPECT_EQ(hrtHostRegister(v.data() + 100, 10, 0), hrtErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(hrtPeekAtLastError(), hrtErrorHostMemoryAlreadyRegistered);
  const std::string msg = hrtGetLastErrorMessage();
  EXPECT_NE(msg.find("hrtHostRegister"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overlaps"), std::string::npos) << msg;
  EXPECT_EQ(hrtPeekAtLastError(), hrtErrorHostMemoryAlreadyRegistered) << "peek must not reset";
  EXPECT_EQ(hrtGetLastError(), hrtErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(hrtGetLastError(), hrtSuccess) << "get must reset";
  EXPECT_EQ(hrtHostUnregister(v.data() + 1), hrtErrorHostMemoryNotRegistered);
  EXPECT_EQ(hrtHostUnregister(v.data()), hrtSuccess);
  EXPECT_EQ(hrtHostUnregister(v.data()), hrtErrorHostMemoryNotRegistered);
  EXPECT_EQ(hrtHostRegister(nullptr, 10, 0), hrtErrorInvalidValue);
}

TEST_P(CApi, AsyncRoundTripWithEventsAndStreams) {
  const std::size_t n = 3000;
  void *src = nullptr, *dst = nullptr;
  ASSERT_EQ(hrtMallocHost(&src, n), hrtSuccess);
  ASSERT_EQ(hrtMallocHost(&dst, n), hrtSuccess);
  fill(src, n, 71);
  hrtStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s1), hrtSuccess);
  ASSERT_EQ(hrtStreamCreate(&s2), hrtSuccess);
  hrtEvent_t e = nullptr;
  ASSERT_EQ(hrtEventCreate(&e), hrtSuccess);
  EXPECT_EQ(hrtEventQuery(e), hrtSuccess);  // never recorded
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(1), src, n, hrtMemcpyHostToDevice, s1), hrtSuccess);
  ASSERT_EQ(hrtEventRecord(e, s1), hrtSuccess);
  ASSERT_EQ(hrtStreamWaitEvent(s2, e, 0), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(dst, hrtDevicePtr(1), n, hrtMemcpyDeviceToHost, s2), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(s2), hrtSuccess);
  EXPECT_EQ(hrtEventSynchronize(e), hrtSuccess);
  EXPECT_EQ(hrtEventQuery(e), hrtSuccess);
  EXPECT_EQ(hrtStreamQuery(s1), hrtSuccess);
  EXPECT_EQ(first_diff(src, dst, n), -1);
  EXPECT_EQ(hrtStreamWaitEvent(s2, e, 1), hrtErrorInvalidValue);
  EXPECT_EQ(hrtEventDestroy(e), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s1), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s2), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(src), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(dst), hrtSuccess);
}

TEST_P(CApi, DefaultStreamAndSynchronousMemcpyWithPageableMemory) {
  std::vector<unsigned char> src = pattern(4000, 72), dst(4000, 0);
  ASSERT_EQ(hrtMemcpy(hrtDevicePtr(0), src.data(), src.size(), hrtMemcpyHostToDevice), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(dst.data(), hrtDevicePtr(0), dst.size(), hrtMemcpyDeviceToHost, nullptr),
            hrtSuccess);
  EXPECT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess);
  EXPECT_EQ(first_diff(src.data(), dst.data(), src.size()), -1);
  std::vector<unsigned char> h(9000, 0), g = pattern(9000, 73);
  ASSERT_EQ(hrtMemcpy(h.data(), g.data(), h.size(), hrtMemcpyHostToHost), hrtSuccess);
  EXPECT_EQ(first_diff(h.data(), g.data(), h.size()), -1);
  EXPECT_EQ(hrtDeviceSynchronize(), hrtSuccess);
}

TEST_P(CApi, BadCopiesAndHandles) {
  void* p = nullptr;
  ASSERT_EQ(hrtMallocHost(&p, 64), hrtSuccess);
  EXPECT_EQ(hrtMemcpyAsync(hrtDevicePtr(4000), p, 96, hrtMemcpyHostToDevice, nullptr), hrtErrorInvalidValue);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("hrtMemcpyAsync"), std::string::npos);
  EXPECT_EQ(hrtMemcpyAsync(p, p, 64, static_cast<hrtMemcpyKind>(9), nullptr), hrtErrorInvalidValue);
  EXPECT_EQ(hrtMemcpyAsync(nullptr, p, 64, hrtMemcpyHostToHost, nullptr), hrtErrorInvalidValue);
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  ASSERT_EQ(hrtStreamDestroy(s), hrtSuccess);
  EXPECT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), p, 64, hrtMemcpyHostToDevice, s), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtStreamSynchronize(s), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtStreamDestroy(s), hrtErrorInvalidResourceHandle);
  hrtEvent_t e = nullptr;
  ASSERT_EQ(hrtEventCreate(&e), hrtSuccess);
  ASSERT_EQ(hrtEventDestroy(e), hrtSuccess);
  EXPECT_EQ(hrtEventQuery(e), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtEventRecord(nullptr, nullptr), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtStreamCreate(nullptr), hrtErrorInvalidValue);
  EXPECT_EQ(hrtFreeHost(p), hrtSuccess);
}

TEST_P(CApi, ResetDeviceMakesOldStreamsLostAndReopensOnNextUse) {
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  void* p = nullptr;
  ASSERT_EQ(hrtMallocHost(&p, 64), hrtSuccess);
  ASSERT_EQ(hrtDeviceReset(), hrtSuccess);
  EXPECT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), p, 64, hrtMemcpyHostToDevice, s), hrtErrorDeviceLost);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("closed"), std::string::npos)
      << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtFreeHost(p), hrtSuccess) << "memory of a closed device can still be freed";
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  ASSERT_EQ(hrtMallocHost(&p, 64), hrtSuccess) << "the device reopens on next use";
  EXPECT_EQ(hrtMemcpy(hrtDevicePtr(0), p, 64, hrtMemcpyHostToDevice), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(p), hrtSuccess);
}

TEST_P(CApi, LastErrorIsPerThread) {
  EXPECT_EQ(hrtFreeHost(reinterpret_cast<void*>(0x1234)), hrtErrorInvalidValue);
  hrtError_t other = hrtErrorUnknown;
  std::thread([&] { other = hrtPeekAtLastError(); }).join();
  EXPECT_EQ(other, hrtSuccess);
  EXPECT_EQ(hrtGetLastError(), hrtErrorInvalidValue);
}

TEST_P(CApi, StreamPriorityRangeClampAndGet) {
  int least = 99, greatest = 99;
  ASSERT_EQ(hrtDeviceGetStreamPriorityRange(&least, &greatest), hrtSuccess);
  EXPECT_EQ(least, 1);
  EXPECT_EQ(greatest, -1);
  int one = 99;
  EXPECT_EQ(hrtDeviceGetStreamPriorityRange(nullptr, &one), hrtSuccess);
  EXPECT_EQ(one, -1);
  EXPECT_EQ(hrtDeviceGetStreamPriorityRange(&one, nullptr), hrtSuccess);
  EXPECT_EQ(one, 1);
  EXPECT_EQ(hrtDeviceGetStreamPriorityRange(nullptr, nullptr), hrtSuccess);

  const bool nice = has_cap_sys_nice();
  void *src = nullptr, *dst = nullptr;
  ASSERT_EQ(hrtMallocHost(&src, 256), hrtSuccess);
  ASSERT_EQ(hrtMallocHost(&dst, 256), hrtSuccess);
  struct Case {
    int asked, got;
  };
  for (const Case c : {Case{-1, -1}, Case{0, 0}, Case{1, 1}, Case{-100, -1}, Case{INT_MIN, -1}, Case{2, 1},
                       Case{INT_MAX, 1}}) {
    if (c.got == greatest && !nice) continue;  // HighPriorityWithoutCapSysNice... covers it
    hrtStream_t s = nullptr;
    ASSERT_EQ(hrtStreamCreateWithPriority(&s, 0, c.asked), hrtSuccess)
        << c.asked << ": " << hrtGetLastErrorMessage();
    int p = 99;
    EXPECT_EQ(hrtStreamGetPriority(s, &p), hrtSuccess);
    EXPECT_EQ(p, c.got) << "asked " << c.asked;
    fill(src, 256, static_cast<unsigned>(c.asked & 0xff));
    ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(8), src, 256, hrtMemcpyHostToDevice, s), hrtSuccess);
    ASSERT_EQ(hrtMemcpyAsync(dst, hrtDevicePtr(8), 256, hrtMemcpyDeviceToHost, s), hrtSuccess);
    ASSERT_EQ(hrtStreamSynchronize(s), hrtSuccess);
    EXPECT_EQ(first_diff(src, dst, 256), -1) << "priority " << c.got;
    EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  }
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  int p = 99;
  EXPECT_EQ(hrtStreamGetPriority(s, &p), hrtSuccess);
  EXPECT_EQ(p, 0) << "hrtStreamCreate: the default priority";
  EXPECT_EQ(hrtStreamGetPriority(s, nullptr), hrtErrorInvalidValue);
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  EXPECT_EQ(hrtStreamGetPriority(s, &p), hrtErrorInvalidResourceHandle);
  p = 99;
  EXPECT_EQ(hrtStreamGetPriority(nullptr, &p), hrtSuccess);
  EXPECT_EQ(p, 0) << "the default stream";

  hrtStream_t untouched = nullptr;
  EXPECT_EQ(hrtStreamCreateWithPriority(&untouched, 2, 0), hrtErrorInvalidValue);
  EXPECT_EQ(untouched, nullptr);
  const std::string msg = hrtGetLastErrorMessage();
  EXPECT_NE(msg.find("hrtStreamCreateWithPriority"), std::string::npos) << msg;
  EXPECT_NE(msg.find("flags"), std::string::npos) << msg;
  EXPECT_EQ(hrtStreamCreateWithPriority(nullptr, 0, 0), hrtErrorInvalidValue);
  EXPECT_EQ(hrtFreeHost(src), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(dst), hrtSuccess);
}

TEST_P(CApi, HighPriorityWithoutCapSysNiceIsPermissionDenied) {
  WithoutCapSysNice drop;
  ASSERT_FALSE(has_cap_sys_nice()) << "could not drop CAP_SYS_NICE";
  hrtStream_t s = nullptr;
  EXPECT_EQ(hrtStreamCreateWithPriority(&s, 0, -1), hrtErrorPermissionDenied);
  EXPECT_EQ(s, nullptr);
  const std::string msg = hrtGetLastErrorMessage();
  EXPECT_NE(msg.find("hrtStreamCreateWithPriority"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CAP_SYS_NICE"), std::string::npos) << msg;
  EXPECT_EQ(hrtStreamCreateWithPriority(&s, 0, -7), hrtErrorPermissionDenied) << "clamped to high";
  ASSERT_EQ(hrtStreamCreateWithPriority(&s, 0, 1), hrtSuccess) << "low needs nothing";
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  EXPECT_STREQ(hrtGetErrorName(hrtErrorPermissionDenied), "hrtErrorPermissionDenied");
}

INSTANTIATE_TEST_SUITE_P(Backends, CApi, ::testing::Values(Backend::Emulated, Backend::Drm), backend_name);

TEST(CApiStrings, EveryCodeHasANameAndAString) {
  for (int c : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 999}) {
    const auto e = static_cast<hrtError_t>(c);
    EXPECT_STRNE(hrtGetErrorName(e), "unrecognized error code") << c;
    EXPECT_STRNE(hrtGetErrorString(e), "unrecognized error code") << c;
  }
  EXPECT_STREQ(hrtGetErrorString(static_cast<hrtError_t>(1000)), "unrecognized error code");
}

TEST(CApiNoDevice, DrmWithoutADeviceSaysSo) {
  ::setenv("HOSTRT_BACKEND", "drm", 1);
  if (Device::count(Backend::Drm) != 0) GTEST_SKIP() << "a real device is present";
  void* p = nullptr;
  EXPECT_EQ(hrtMallocHost(&p, 64), hrtErrorNoDevice);
  ::unsetenv("HOSTRT_BACKEND");
}

}  // namespace
}  // namespace hostrt::test
