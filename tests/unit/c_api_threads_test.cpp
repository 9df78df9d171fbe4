// C handles used from several threads at once, as CUDA allows: one event recorded on one thread
// while others query it, synchronize on it and make streams wait for it. Before, a record
// replaced the event's stream reference and dependency list under readers' feet (a
// use-after-free; TSan reports the race, the plain build may crash).
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "c_api_fixture.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class CApiThreads : public CApiBackendTest {};

TEST_P(CApiThreads, OneEventRecordedWhileOthersQuerySynchronizeAndWait) {
  const int rounds = GetParam() == Backend::Emulated ? 400 : 20;
  void* buf = nullptr;
  ASSERT_EQ(hrtMallocHost(&buf, 64), hrtSuccess);
  hrtStream_t producer = nullptr, consumer = nullptr, other = nullptr;
  ASSERT_EQ(hrtStreamCreate(&producer), hrtSuccess);
  ASSERT_EQ(hrtStreamCreate(&consumer), hrtSuccess);
  ASSERT_EQ(hrtStreamCreate(&other), hrtSuccess);
  hrtEvent_t e = nullptr, upstream = nullptr;
  ASSERT_EQ(hrtEventCreate(&e), hrtSuccess);
  ASSERT_EQ(hrtEventCreate(&upstream), hrtSuccess);

  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::mutex first_error_m;
  std::string first_error;
  auto failed = [&](const char* call, hrtError_t r) {
    ++bad;
    std::lock_guard lk(first_error_m);
    if (first_error.empty())
      first_error = std::string(call) + ": " + hrtGetErrorName(r) + ": " + hrtGetLastErrorMessage();
  };
  std::thread recorder([&] {
    for (int i = 0; i < rounds; ++i) {
      // Each recording carries a dependency (the producer waited for `upstream`), so the
      // event's list is replaced on every record.
      hrtError_t r = hrtMemcpyAsync(hrtDevicePtr(0), buf, 64, hrtMemcpyHostToDevice, other);
      if (r != hrtSuccess) failed("hrtMemcpyAsync(other)", r);
      if ((r = hrtEventRecord(upstream, other)) != hrtSuccess) failed("hrtEventRecord(upstream)", r);
      if ((r = hrtStreamWaitEvent(producer, upstream, 0)) != hrtSuccess)
        failed("hrtStreamWaitEvent(producer)", r);
      if ((r = hrtEventRecord(e, producer)) != hrtSuccess) failed("hrtEventRecord", r);
    }
    done = true;
  });
  auto reader = [&](int kind) {
    while (!done.load()) {
      hrtError_t r = hrtSuccess;
      const char* call = "";
      if (kind == 0) {
        call = "hrtEventQuery";
        r = hrtEventQuery(e);
        if (r == hrtErrorNotReady) r = hrtSuccess;
      } else if (kind == 1) {
        call = "hrtEventSynchronize";
        r = hrtEventSynchronize(e);
      } else {
        call = "hrtStreamWaitEvent(consumer)";
        r = hrtStreamWaitEvent(consumer, e, 0);
        if (r == hrtSuccess) {
          call = "hrtMemcpyAsync(consumer)";
          r = hrtMemcpyAsync(buf, hrtDevicePtr(0), 64, hrtMemcpyDeviceToHost, consumer);
          // The driver's copies take ~100 ms each: wait for them rather than queue hundreds.
          if (r == hrtSuccess && GetParam() == Backend::Drm) r = hrtStreamSynchronize(consumer);
        }
      }
      if (r != hrtSuccess) failed(call, r);
    }
  };
  std::vector<std::thread> readers;
  for (int k = 0; k < 3; ++k) readers.emplace_back(reader, k);
  recorder.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0) << "calls failed, the first: " << first_error;
  EXPECT_EQ(hrtStreamSynchronize(consumer), hrtSuccess);
  EXPECT_EQ(hrtEventSynchronize(e), hrtSuccess);
  EXPECT_EQ(hrtEventDestroy(e), hrtSuccess);
  EXPECT_EQ(hrtEventDestroy(upstream), hrtSuccess);
  for (hrtStream_t s : {producer, consumer, other}) EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(buf), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, CApiThreads, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
