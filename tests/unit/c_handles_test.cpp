// The C API's handles: a handle names one object for that object's life and nothing after it,
// even when a new object of the same kind takes its place, and handles are checked without a
// process-wide lock while other threads make and destroy theirs. Before, a handle was the
// object's address, checked against a set under one mutex: the next object often landed at
// the same address, and the stale handle then worked on it.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "c_api_fixture.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt_pool.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class CHandles : public CApiBackendTest {};

TEST_P(CHandles, ADestroyedHandleStaysInvalidWhenANewObjectTakesItsPlace) {
  hrtEvent_t e1 = nullptr, e2 = nullptr;
  ASSERT_EQ(hrtEventCreate(&e1), hrtSuccess);
  ASSERT_EQ(hrtEventDestroy(e1), hrtSuccess);
  ASSERT_EQ(hrtEventCreate(&e2), hrtSuccess);
  EXPECT_NE(e1, e2) << "the new event got the destroyed one's handle";
  EXPECT_EQ(hrtEventQuery(e1), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtEventDestroy(e1), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtEventQuery(e2), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtEventDestroy(e2), hrtSuccess);

  hrtStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s1), hrtSuccess);
  ASSERT_EQ(hrtStreamDestroy(s1), hrtSuccess);
  ASSERT_EQ(hrtStreamCreate(&s2), hrtSuccess);
  EXPECT_NE(s1, s2);
  EXPECT_EQ(hrtStreamQuery(s1), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtStreamSynchronize(s2), hrtSuccess) << hrtGetLastErrorMessage();

  hrtPool_t p1 = nullptr, p2 = nullptr;
  ASSERT_EQ(hrtPoolCreate(&p1, s2, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolDestroy(p1), hrtSuccess);
  ASSERT_EQ(hrtPoolCreate(&p2, s2, nullptr), hrtSuccess);
  EXPECT_NE(p1, p2);
  void* b = nullptr;
  EXPECT_EQ(hrtPoolMallocAsync(p1, &b, 64, s2), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtPoolMallocAsync(p2, &b, 64, s2), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtPoolFreeAsync(p2, b, s2), hrtSuccess);
  EXPECT_EQ(hrtPoolDestroy(p2), hrtSuccess) << hrtGetLastErrorMessage();

  hrtRegCache_t c1 = nullptr, c2 = nullptr;
  ASSERT_EQ(hrtRegCacheCreate(&c1, s2, 0), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtRegCacheDestroy(c1), hrtSuccess);
  ASSERT_EQ(hrtRegCacheCreate(&c2, s2, 0), hrtSuccess);
  EXPECT_NE(c1, c2);
  EXPECT_EQ(hrtRegCacheDestroy(c1), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtRegCacheDestroy(c2), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s2), hrtSuccess);
}

TEST_P(CHandles, AHandleOfAnotherKindOrMadeUpIsRefusedNotFollowed) {
  hrtStream_t s = nullptr;
  hrtEvent_t e = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  ASSERT_EQ(hrtEventCreate(&e), hrtSuccess);
  // Each handle passed where another kind is expected.
  EXPECT_EQ(hrtEventQuery(reinterpret_cast<hrtEvent_t>(s)), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtStreamQuery(reinterpret_cast<hrtStream_t>(e)), hrtErrorInvalidResourceHandle);
  void* b = nullptr;
  EXPECT_EQ(hrtPoolMallocAsync(reinterpret_cast<hrtPool_t>(e), &b, 64, s), hrtErrorInvalidResourceHandle);
  // Values no call ever returned, some of them pointing at readable memory.
  int local = 0;
  for (std::uintptr_t v : {std::uintptr_t{1}, std::uintptr_t{0x12345},
                           reinterpret_cast<std::uintptr_t>(&local), ~std::uintptr_t{0}}) {
    SCOPED_TRACE(std::to_string(v));
    EXPECT_EQ(hrtStreamQuery(reinterpret_cast<hrtStream_t>(v)), hrtErrorInvalidResourceHandle);
    EXPECT_EQ(hrtEventQuery(reinterpret_cast<hrtEvent_t>(v)), hrtErrorInvalidResourceHandle);
    EXPECT_EQ(hrtPoolDestroy(reinterpret_cast<hrtPool_t>(v)), hrtErrorInvalidResourceHandle);
  }
  EXPECT_EQ(hrtEventDestroy(e), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
}

// Threads make, use and destroy events and pools, publishing each event's handle once it is
// destroyed, while another thread keeps asking about the last one published: every such call
// must be refused, although the thread that destroyed it is making its next event meanwhile
// (before, usually at the same address, which made the stale handle live again). TSan: no race
// in the lookups, which take no lock.
TEST_P(CHandles, StaleHandlesStayRefusedWhileOtherThreadsReuseTheirPlaces) {
  const int rounds = GetParam() == Backend::Emulated ? 300 : 40;
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);

  std::atomic<hrtEvent_t> last_destroyed{nullptr};
  std::atomic<bool> done{false};
  std::atomic<int> accepted{0}, failures{0};
  std::mutex first_failure_m;
  std::string first_failure;
  std::thread watcher([&] {
    while (!done.load())
      if (hrtEvent_t e = last_destroyed.load();
          e != nullptr && hrtEventQuery(e) != hrtErrorInvalidResourceHandle)
        ++accepted;
  });
  std::vector<std::thread> users;
  for (int t = 0; t < 2; ++t)
    users.emplace_back([&] {
      for (int i = 0; i < rounds; ++i) {
        hrtEvent_t e = nullptr;
        hrtPool_t p = nullptr;
        void* b = nullptr;
        bool ok = hrtEventCreate(&e) == hrtSuccess && hrtEventRecord(e, s) == hrtSuccess &&
                  hrtEventSynchronize(e) == hrtSuccess && hrtEventDestroy(e) == hrtSuccess;
        if (ok) last_destroyed.store(e);
        ok = ok && hrtPoolCreate(&p, s, nullptr) == hrtSuccess &&
             hrtPoolMallocAsync(p, &b, 256, s) == hrtSuccess && hrtPoolFreeAsync(p, b, s) == hrtSuccess &&
             hrtPoolDestroy(p) == hrtSuccess;
        if (!ok) {
          std::lock_guard lk(first_failure_m);
          if (failures++ == 0) first_failure = hrtGetLastErrorMessage();
        }
      }
    });
  for (auto& u : users) u.join();
  done = true;
  watcher.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(accepted.load(), 0) << "calls on destroyed events were taken for calls on live ones";
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, CHandles, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
