// The C API's NULL stream is CUDA's legacy default stream: its work follows the earlier work
// of the device's blocking streams and theirs follows its earlier work; non-blocking streams
// take no part. And what a stream waits for (hrtStreamWaitEvent) is part of the stream for
// its synchronize, query and host functions, as an enqueued wait is in CUDA.
//
// The earlier work is a copy behind a gate: a stream whose work cannot end yet (Emulated: its
// queue is held until the test releases it) or ends late (Drm: a 4096-byte staged copy, two
// edu transfers). A stream made to wait for the gate then has work that is queued but not
// ready, so work of another stream that does not wait for it runs first and reads the old
// bytes.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "c_api_fixture.hpp"
#include "detail/access.hpp"
#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

using std::chrono::milliseconds;

class LegacyStream : public CApiBackendTest {
 protected:
  static constexpr std::size_t kBytes = 4096;

  void SetUp() override {
    CApiBackendTest::SetUp();
    if (IsSkipped()) return;
    for (void** p : {&src_, &mid_, &out_, &gate_src_, &gate_dst_})
      ASSERT_EQ(hrtMallocHost(p, kBytes), hrtSuccess) << hrtGetLastErrorMessage();
    std::memset(src_, 0x11, kBytes);
    std::memset(mid_, 0, kBytes);
    std::memset(out_, 0, kBytes);
    ASSERT_EQ(hrtStreamCreate(&gate_), hrtSuccess);
    ASSERT_EQ(hrtStreamCreate(&s1_), hrtSuccess);
    ASSERT_EQ(hrtEventCreateWithFlags(&gate_done_, hrtEventDisableTiming), hrtSuccess);
  }

  void TearDown() override {
    if (!IsSkipped()) {
      open_gate();
      EXPECT_EQ(hrtDeviceSynchronize(), hrtSuccess) << hrtGetLastErrorMessage();
      hrtEventDestroy(gate_done_);
      hrtStreamDestroy(s1_);
      hrtStreamDestroy(gate_);
      for (void* p : {src_, mid_, out_, gate_src_, gate_dst_}) hrtFreeHost(p);
    }
    CApiBackendTest::TearDown();
  }

  // Queues the gate's copy (gate_done_ after it) and `s` waiting for it.
  void close_gate(hrtStream_t s) {
    if (detail::EmulatedBackend* e = emu()) e->hold_queue(queue_of(gate_), true);
    ASSERT_EQ(hrtMemcpyAsync(gate_dst_, gate_src_, kBytes, hrtMemcpyHostToHost, gate_), hrtSuccess);
    ASSERT_EQ(hrtEventRecord(gate_done_, gate_), hrtSuccess);
    ASSERT_EQ(hrtStreamWaitEvent(s, gate_done_, 0), hrtSuccess);
  }
  void open_gate() {
    if (detail::EmulatedBackend* e = emu()) e->hold_queue(queue_of(gate_), false);
  }
  // Opens the gate once the caller is blocked (CApiBackendTest::release_later).
  std::thread open_gate_later(std::atomic<bool>& opened) {
    return release_later(opened, [this] { open_gate(); });
  }
  static long first_not(const void* p, unsigned char v) {
    const std::vector<unsigned char> want(kBytes, v);
    return first_diff(p, want.data(), kBytes);
  }

  void *src_ = nullptr, *mid_ = nullptr, *out_ = nullptr, *gate_src_ = nullptr, *gate_dst_ = nullptr;
  hrtStream_t gate_ = nullptr, s1_ = nullptr;
  hrtEvent_t gate_done_ = nullptr;
};

// s1's copy waits behind the gate; the NULL stream's copy of what s1 writes must follow it.
TEST_P(LegacyStream, NullStreamWorkFollowsEarlierWorkOfBlockingStreams) {
  close_gate(s1_);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, s1_), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(out_, mid_, kBytes, hrtMemcpyHostToHost, nullptr), hrtSuccess);
  if (emu()) {
    emu()->wait_until_stalled();
    EXPECT_EQ(hrtStreamQuery(nullptr), hrtErrorNotReady) << "the NULL stream's copy ran before s1's";
  }
  open_gate();
  ASSERT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(first_not(out_, 0x11), -1) << "the NULL stream's copy read what s1 had not written yet";
}

// hrtMemcpy is a copy on the NULL stream and a wait for it: it sees s1's bytes.
TEST_P(LegacyStream, HrtMemcpySeesTheEarlierWorkOfBlockingStreams) {
  close_gate(s1_);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, s1_), hrtSuccess);
  std::atomic<bool> opened{false};
  std::thread opener = open_gate_later(opened);
  EXPECT_EQ(hrtMemcpy(out_, mid_, kBytes, hrtMemcpyHostToHost), hrtSuccess) << hrtGetLastErrorMessage();
  opener.join();
  EXPECT_EQ(first_not(out_, 0x11), -1) << "hrtMemcpy read what s1 had not written yet";
}

// The other direction: s1's copy of what the NULL stream writes follows the NULL stream's.
TEST_P(LegacyStream, BlockingStreamWorkFollowsEarlierNullStreamWork) {
  close_gate(nullptr);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, nullptr), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(out_, mid_, kBytes, hrtMemcpyHostToHost, s1_), hrtSuccess);
  if (emu()) {
    emu()->wait_until_stalled();
    EXPECT_EQ(hrtStreamQuery(s1_), hrtErrorNotReady) << "s1's copy ran before the NULL stream's";
  }
  open_gate();
  ASSERT_EQ(hrtStreamSynchronize(s1_), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(first_not(out_, 0x11), -1) << "s1's copy read what the NULL stream had not written yet";
}

// hrtStreamSynchronize(NULL) returns only once the blocking streams' earlier work has ended,
// even with nothing queued on the NULL stream itself.
TEST_P(LegacyStream, SynchronizingTheNullStreamWaitsForBlockingStreams) {
  close_gate(s1_);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, s1_), hrtSuccess);
  if (emu()) {
    emu()->wait_until_stalled();
    EXPECT_EQ(hrtStreamQuery(nullptr), hrtErrorNotReady);
  }
  std::atomic<bool> opened{false};
  std::thread opener = open_gate_later(opened);
  EXPECT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_TRUE(opened.load()) << "returned while the gate was closed";
  EXPECT_EQ(hrtStreamQuery(s1_), hrtSuccess) << "returned before s1's copy ended";
  EXPECT_EQ(first_not(mid_, 0x11), -1);
  opener.join();
}

// An event recorded and a host function launched on the NULL stream come after the blocking
// streams' earlier work.
TEST_P(LegacyStream, EventsAndHostFunctionsOnTheNullStreamFollowBlockingStreams) {
  close_gate(s1_);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, s1_), hrtSuccess);
  hrtEvent_t e = nullptr;
  ASSERT_EQ(hrtEventCreateWithFlags(&e, hrtEventDisableTiming), hrtSuccess);
  ASSERT_EQ(hrtEventRecord(e, nullptr), hrtSuccess);
  struct Seen {
    void* mid = nullptr;
    std::atomic<long> first_not_copied{-2};
  } seen;
  seen.mid = mid_;
  ASSERT_EQ(hrtLaunchHostFunc(
                nullptr,
                [](void* p) {
                  auto* s = static_cast<Seen*>(p);
                  s->first_not_copied = first_not(s->mid, 0x11);
                },
                &seen),
            hrtSuccess);
  if (emu()) {
    emu()->wait_until_stalled();
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(hrtEventQuery(e), hrtErrorNotReady) << "the event completed before s1's copy";
    EXPECT_EQ(seen.first_not_copied.load(), -2) << "the host function ran before s1's copy ended";
  }
  open_gate();
  ASSERT_EQ(hrtEventSynchronize(e), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(first_not(mid_, 0x11), -1) << "the event completed before s1's copy";
  ASSERT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(seen.first_not_copied.load(), -1) << "the host function ran before s1's copy ended";
  EXPECT_EQ(hrtEventDestroy(e), hrtSuccess);
}

// A blocking stream destroyed with its work still queued: the NULL stream's work still follows
// that work (the host waits for it, as it cannot name the destroyed stream's queue).
TEST_P(LegacyStream, NullStreamWorkFollowsADestroyedBlockingStreamsWork) {
  if (!emu()) GTEST_SKIP() << "needs a held queue";
  hrtStream_t s2 = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s2), hrtSuccess);
  const std::uint32_t q2 = queue_of(s2);
  emu()->hold_queue(q2, true);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, s2), hrtSuccess);
  ASSERT_EQ(hrtStreamDestroy(s2), hrtSuccess);  // its copy is still held
  std::atomic<bool> released{false};
  std::thread releaser = release_later(released, [q2] { emu()->hold_queue(q2, false); });
  ASSERT_EQ(hrtMemcpyAsync(out_, mid_, kBytes, hrtMemcpyHostToHost, nullptr), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  releaser.join();
  EXPECT_TRUE(released.load());
  EXPECT_EQ(first_not(out_, 0x11), -1) << "the NULL stream's copy ran before the destroyed stream's";
}

// Host functions are work of their stream: the NULL stream's copy follows a blocking stream's
// function (which writes what it copies), and a blocking stream's copy follows the NULL
// stream's. The device cannot wait for a function, so the caller waits on the host.
TEST_P(LegacyStream, TheImplicitOrderIncludesHostFunctions) {
  struct Writer {
    void* p = nullptr;
    unsigned char v = 0;
  };
  auto write_late = [](void* a) {
    auto* w = static_cast<Writer*>(a);
    std::this_thread::sleep_for(milliseconds(50));
    std::memset(w->p, w->v, kBytes);
  };
  Writer w1{mid_, 0x11};
  ASSERT_EQ(hrtLaunchHostFunc(s1_, write_late, &w1), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(out_, mid_, kBytes, hrtMemcpyHostToHost, nullptr), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(first_not(out_, 0x11), -1) << "the NULL stream's copy ran before s1's host function";

  Writer w2{mid_, 0x22};
  ASSERT_EQ(hrtLaunchHostFunc(nullptr, write_late, &w2), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(out_, mid_, kBytes, hrtMemcpyHostToHost, s1_), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(s1_), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(first_not(out_, 0x22), -1) << "s1's copy ran before the NULL stream's host function";

  // A function of s1 that orders work on the NULL stream would wait for itself: an error.
  std::atomic<int> status{-1};
  ASSERT_EQ(
      hrtLaunchHostFunc(
          s1_, [](void* a) { static_cast<std::atomic<int>*>(a)->store(hrtStreamQuery(nullptr)); }, &status),
      hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(s1_), hrtSuccess);
  EXPECT_EQ(status.load(), static_cast<int>(hrtErrorInvalidValue)) << "a deadlock, or no error";
}

// Non-blocking streams neither wait for the NULL stream nor are waited for by it.
TEST_P(LegacyStream, NonBlockingStreamsTakeNoPart) {
  if (!emu()) GTEST_SKIP() << "needs a held queue: on Drm the one engine's order hides the difference";
  hrtStream_t nb = nullptr;
  ASSERT_EQ(hrtStreamCreateWithFlags(&nb, hrtStreamNonBlocking), hrtSuccess);
  unsigned flags = 99;
  EXPECT_EQ(hrtStreamGetFlags(nb, &flags), hrtSuccess);
  EXPECT_EQ(flags, hrtStreamNonBlocking);
  EXPECT_EQ(hrtStreamGetFlags(s1_, &flags), hrtSuccess);
  EXPECT_EQ(flags, hrtStreamDefault);
  EXPECT_EQ(hrtStreamGetFlags(nullptr, &flags), hrtSuccess);
  EXPECT_EQ(flags, hrtStreamDefault);

  // The NULL stream's copy waits behind the gate; nb's copy does not wait for it.
  close_gate(nullptr);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, nullptr), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(out_, src_, kBytes, hrtMemcpyHostToHost, nb), hrtSuccess);
  EXPECT_EQ(hrtStreamSynchronize(nb), hrtSuccess) << "a non-blocking stream waited for the NULL stream";
  EXPECT_EQ(first_not(out_, 0x11), -1);
  EXPECT_EQ(hrtStreamQuery(nullptr), hrtErrorNotReady);
  open_gate();
  ASSERT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess);

  // nb's held work does not hold the NULL stream.
  emu()->hold_queue(queue_of(nb), true);
  ASSERT_EQ(hrtMemcpyAsync(out_, src_, kBytes, hrtMemcpyHostToHost, nb), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, nullptr), hrtSuccess);
  EXPECT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess) << "the NULL stream waited for a non-blocking one";
  EXPECT_EQ(hrtStreamQuery(nb), hrtErrorNotReady);
  emu()->hold_queue(queue_of(nb), false);
  EXPECT_EQ(hrtStreamSynchronize(nb), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(nb), hrtSuccess);

  hrtStream_t bad = nullptr;
  EXPECT_EQ(hrtStreamCreateWithFlags(&bad, 2), hrtErrorInvalidValue);
  EXPECT_EQ(bad, nullptr);
  EXPECT_EQ(hrtStreamGetFlags(s1_, nullptr), hrtErrorInvalidValue);
}

// Synchronizing a blocking stream waits for its own work (which already follows the NULL
// stream's earlier work), not for NULL-stream work queued after it. The gate opens when the
// call returns, or after 10 s to end a wait that should not be.
TEST_P(LegacyStream, ABlockingStreamsSynchronizeDoesNotWaitForLaterNullStreamWork) {
  if (!emu()) GTEST_SKIP() << "needs a held queue";
  ASSERT_EQ(hrtMemcpyAsync(mid_, src_, kBytes, hrtMemcpyHostToHost, s1_), hrtSuccess);
  close_gate(nullptr);
  ASSERT_EQ(hrtMemcpyAsync(out_, mid_, kBytes, hrtMemcpyHostToHost, nullptr), hrtSuccess);
  std::mutex m;
  std::condition_variable cv;
  bool returned = false, timed_out = false;
  std::thread opener([&] {
    std::unique_lock lk(m);
    timed_out = !cv.wait_for(lk, std::chrono::seconds(10), [&] { return returned; });
    open_gate();
  });
  EXPECT_EQ(hrtStreamSynchronize(s1_), hrtSuccess) << hrtGetLastErrorMessage();
  {
    std::lock_guard lk(m);
    returned = true;
  }
  cv.notify_one();
  opener.join();
  EXPECT_FALSE(timed_out) << "s1's synchronize waited for NULL-stream work queued after its own";
  ASSERT_EQ(hrtStreamSynchronize(nullptr), hrtSuccess);
  EXPECT_EQ(first_not(out_, 0x11), -1);
}

// What a stream waits for is part of it (CUDA enqueues the wait): its synchronize waits for
// the event, its query is not ready before, and a host function launched after the wait runs
// after the event. The NULL stream is not involved.
TEST_P(LegacyStream, AStreamsWaitsArePartOfItsSynchronizeQueryAndHostFunctions) {
  close_gate(s1_);
  struct Seen {
    hrtEvent_t gate_done = nullptr;
    std::atomic<int> status{-1};
  } seen;
  seen.gate_done = gate_done_;
  ASSERT_EQ(hrtLaunchHostFunc(
                s1_,
                [](void* p) {
                  auto* s = static_cast<Seen*>(p);
                  s->status = hrtEventQuery(s->gate_done);
                },
                &seen),
            hrtSuccess);
  if (emu()) {
    emu()->wait_until_stalled();
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(seen.status.load(), -1) << "the host function ran before the event it follows";
    EXPECT_EQ(hrtStreamQuery(s1_), hrtErrorNotReady) << "query ignored the stream's wait";
  }
  std::atomic<bool> opened{false};
  std::thread opener = open_gate_later(opened);
  EXPECT_EQ(hrtStreamSynchronize(s1_), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_TRUE(opened.load()) << "synchronize returned while the event it waits for was pending";
  EXPECT_EQ(hrtEventQuery(gate_done_), hrtSuccess) << "synchronize returned before the waited event";
  EXPECT_EQ(seen.status.load(), static_cast<int>(hrtSuccess)) << "the host function ran before the event";
  opener.join();
}

INSTANTIATE_TEST_SUITE_P(Backends, LegacyStream, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
