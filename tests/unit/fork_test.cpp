// fork(): a child that uses the parent's device, stream or pool gets UsedAfterFork (C:
// hrtErrorUsedAfterFork) and the parent goes on unharmed; registered ranges are not inherited
// (MADV_DONTFORK) while registered, and are again once unregistered. Emulated on the host,
// Drm in the VM. Children report through their exit status and leave with _exit.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <thread>

#include "c_api_fixture.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt.hpp"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

// Runs f in a child; returns its wait status.
template <class F>
int in_child(F&& f) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // die by the signal, not through a sanitizer's handler
    int code = 99;
    try {
      code = f();
    } catch (...) {
      code = 98;
    }
    flush_coverage();
    _exit(code);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

template <class F>
int code_of(F&& f) {  // 0: threw UsedAfterFork; 1: did not throw; 2: threw something else
  try {
    f();
    return 1;
  } catch (const UsedAfterFork&) {
    return 0;
  } catch (...) {
    return 2;
  }
}

class ForkTest : public DeviceStreamTest {};

TEST_P(ForkTest, AChildUsingTheParentsDeviceOrPoolGetsUsedAfterFork) {
  Pool pool(*device);
  void* held = pool.allocate(256, stream);
  void* warm = pool.allocate(128, stream);
  pool.deallocate(warm, stream);  // parked in this thread's cache: the child's warm path
  const int status = in_child([&] {
    int r = 0;
    r |= code_of([&] { (void)pool.allocate(128, stream); }) << 0;
    r |= code_of([&] { pool.deallocate(held, stream); }) << 2;
    r |= code_of([&] { (void)device->create_stream(); }) << 4;
    r |= code_of([&] { stream.synchronize(); }) << 6;
    return r;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child crashed instead of getting an error";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits per call, 1: no error, 2: another error";
  // The parent is unharmed: its objects were not released by the child.
  void* p = pool.allocate(128, stream);
  fill(p, 128, 3);
  stream.memcpy_async(DevicePtr(0), p, 128);
  stream.synchronize();
  pool.deallocate(p, stream);
  pool.deallocate(held, stream);
}

// A host function queued in the parent at the fork: its thread does not exist in the child,
// so a child's stream-ordered free after it would wait for it forever (alarm: the child dies
// by SIGALRM instead of hanging the suite).
TEST_P(ForkTest, AChildFreeingAfterTheParentsHostFunctionGetsUsedAfterForkNotAHang) {
  Pool pool(*device);
  void* p = pool.allocate(256, stream);
  std::atomic<bool> go{false};
  stream.launch_host_func([&] {
    while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  const int status = in_child([&] {
    alarm(20);
    return code_of([&] { pool.deallocate(p, stream); });
  });
  go = true;
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung (or crashed) instead of getting an error";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: another error";
  stream.synchronize();
  pool.deallocate(p, stream);
}

TEST_P(ForkTest, RegisteredRangesAreNotInheritedWhileRegistered) {
  const std::size_t ps = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* bytes = static_cast<volatile unsigned char*>(m);
  bytes[0] = 7;
  bytes[ps] = 8;
  {
    PinnedBuffer reg = device->host_register(m, ps);
    const int status = in_child([&] { return bytes[0] == 7 ? 0 : 1; });
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
        << "a registered page reached the child (status " << status << ")";
    EXPECT_EQ(in_child([&] { return bytes[ps] == 8 ? 0 : 1; }), 0) << "the page next to it is inherited";
  }
  EXPECT_EQ(in_child([&] { return bytes[0] == 7 ? 0 : 1; }), 0) << "inherited again once unregistered";
  munmap(m, 2 * ps);
}

// Pinned memory (host_alloc, a pool's segments) is not the child's: the driver maps BOs
// VM_DONTCOPY, and the emulated backend agrees (before, its BOs were shared with the child,
// which saw the parent's later writes and could write the parent's pinned memory).
TEST_P(ForkTest, PinnedMemoryIsNotInheritedByAChild) {
  PinnedBuffer b = device->host_alloc(4096);
  auto* bytes = static_cast<volatile unsigned char*>(b.data());
  bytes[0] = 7;
  int status = in_child([&] { return bytes[0] == 7 ? 0 : 1; });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
      << "host_alloc memory reached the child (status " << status << ")";
  Pool pool(*device);
  auto* block = static_cast<volatile unsigned char*>(pool.allocate(256, stream));
  block[0] = 9;
  status = in_child([&] { return block[0] == 9 ? 0 : 1; });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
      << "a pool block reached the child (status " << status << ")";
  pool.deallocate(const_cast<unsigned char*>(block), stream);
}

// A registration of heap memory rarely starts or ends on a page boundary: the bytes that share
// its first and last page with it (a malloc neighbour) stay the child's to read. Before, the
// whole pages were MADV_DONTFORK and the child died by SIGSEGV on its own heap.
TEST_P(ForkTest, NeighboursOnARegistrationsEdgePagesAreInherited) {
  const std::size_t ps = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, 4 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* bytes = static_cast<volatile unsigned char*>(m);
  for (std::size_t i = 0; i < 4 * ps; i += 64) bytes[i] = 5;
  {
    // [100, 3 pages - 100): edge pages 0 and 2 hold neighbours, page 1 is wholly inside.
    PinnedBuffer reg = device->host_register(static_cast<char*>(m) + 100, 3 * ps - 200);
    EXPECT_EQ(in_child([&] { return bytes[0] == 5 ? 0 : 1; }), 0) << "the neighbour before the range";
    EXPECT_EQ(in_child([&] { return bytes[3 * ps - 64] == 5 ? 0 : 1; }), 0)
        << "the neighbour after the range";
    const int status = in_child([&] { return bytes[ps] == 5 ? 0 : 1; });
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
        << "the page wholly inside the range reached the child (status " << status << ")";
  }
  munmap(m, 4 * ps);
}

TEST(ForkCApiTest, AChildGetsHrtErrorUsedAfterFork) {
  setenv("HOSTRT_BACKEND", "emulated", 1);
  SKIP_WITHOUT_DEVICE(Backend::Emulated);
  hrtPool_t pool = nullptr;
  ASSERT_EQ(hrtPoolCreate(&pool, nullptr, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  const int status = in_child([&] {
    void* p = nullptr;
    if (hrtPoolMalloc(pool, &p, 100) != hrtErrorUsedAfterFork) return 1;
    if (hrtStreamSynchronize(nullptr) != hrtErrorUsedAfterFork) return 2;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_STREQ(hrtGetErrorName(hrtErrorUsedAfterFork), "hrtErrorUsedAfterFork");
  EXPECT_EQ(hrtPoolDestroy(pool), hrtSuccess);
}

// hrtDeviceReset in a child whose parent had work pending in the default pool: the child
// cannot wait for the parent's streams (UsedAfterFork inside the reset), so the reset drops
// the device without waiting, succeeds, and leaves the pool to the parent, whose pending free
// still completes there.
TEST(ForkCApiTest, ResetInAChildDropsTheParentsDeviceWithoutWaiting) {
  setenv("HOSTRT_BACKEND", "emulated", 1);
  SKIP_WITHOUT_DEVICE(Backend::Emulated);
  ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
  void* p = nullptr;
  ASSERT_EQ(hrtMallocAsync(&p, 1000, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), p, 1000, hrtMemcpyHostToDevice, nullptr), hrtSuccess);
  ASSERT_EQ(hrtFreeAsync(p, nullptr), hrtSuccess);
  const int status = in_child([&] { return hrtDeviceReset() == hrtSuccess ? 0 : 1; });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(hrtDeviceSynchronize(), hrtSuccess) << hrtGetLastErrorMessage();
  hrtPool_t dp = nullptr;
  ASSERT_EQ(hrtDeviceGetDefaultMemPool(&dp, 0), hrtSuccess);
  hrtPoolStats st{};
  ASSERT_EQ(hrtPoolSynchronize(dp), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolGetStats(dp, &st), hrtSuccess);
  EXPECT_EQ(st.pendingFreeBytes, 0u);
  EXPECT_EQ(st.allocatedBytes, 0u);
}

// Every C entry point checks the fork before it touches a mapping: on the driver the
// completion page is not inherited (VM_DONTCOPY), and hrtFreeAsync, hrtEventQuery and
// hrtEventSynchronize on the parent's objects died with SIGSEGV in the child, while
// hrtEventRecord on the parent's stream succeeded.
class ForkCApiBackends : public CApiBackendTest {};

TEST_P(ForkCApiBackends, EventsStreamsAndFreesOfTheParentGiveUsedAfterForkNotACrash) {
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  void *p = nullptr, *src = nullptr;
  ASSERT_EQ(hrtMallocHost(&src, 256), hrtSuccess);
  ASSERT_EQ(hrtMallocAsync(&p, 256, s), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), src, 256, hrtMemcpyHostToDevice, s), hrtSuccess);
  hrtEvent_t e = nullptr;
  ASSERT_EQ(hrtEventCreate(&e), hrtSuccess);
  ASSERT_EQ(hrtEventRecord(e, s), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(s), hrtSuccess);
  const int status = in_child([&] {
    if (hrtEventQuery(e) != hrtErrorUsedAfterFork) return 1;
    if (hrtEventSynchronize(e) != hrtErrorUsedAfterFork) return 2;
    if (hrtEventRecord(e, s) != hrtErrorUsedAfterFork) return 3;
    if (hrtFreeAsync(p, s) != hrtErrorUsedAfterFork) return 4;
    if (hrtStreamQuery(s) != hrtErrorUsedAfterFork) return 5;
    if (hrtStreamWaitEvent(s, e, 0) != hrtErrorUsedAfterFork) return 6;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "the child died by signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the check that failed (see the child's code)";
  // The parent goes on unharmed.
  EXPECT_EQ(hrtEventQuery(e), hrtSuccess);
  EXPECT_EQ(hrtFreeAsync(p, s), hrtSuccess);
  EXPECT_EQ(hrtStreamSynchronize(s), hrtSuccess);
  EXPECT_EQ(hrtEventDestroy(e), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(src), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, ForkCApiBackends, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

INSTANTIATE_TEST_SUITE_P(Backends, ForkTest, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
