// Event timing (cudaEventElapsedTime): an event's time is when its stream reached it, taken
// from the job's end (the driver's fence, the emulated engine's stamp), not from when the
// host happened to look. Every bound below is causal, not a guess at a duration: the host
// reads its clock before and after each step, and an event's time must fall between the
// readings that enclose it. Both backends; on Drm a slow job (edu takes ~100 ms of guest time
// per transfer) stands in for the emulated backend's held queue.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "c_api_fixture.hpp"
#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.h"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class EventTiming : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    dev_.emplace(Device::open(0, GetParam()));
    src_ = dev().host_alloc(kBytes);
    dst_ = dev().host_alloc(kBytes);
    fill(src_.data(), kBytes, 5);
  }
  Device& dev() { return *dev_; }
  detail::EmulatedBackend* emu() { return detail::emulated_backend(dev()); }

  // Makes s's next work wait: its queue held (Emulated) or a slow copy queued (Drm).
  void slow_down(Stream& s) {
    if (emu())
      emu()->hold_queue(hostrt::detail::Access::core(s)->queue_id(), true);
    else
      s.memcpy_async(dst_.data(), src_.data(), kBytes, CopyKind::H2H);
  }
  void release(Stream& s) {
    if (emu()) emu()->hold_queue(hostrt::detail::Access::core(s)->queue_id(), false);
  }
  void copy(Stream& s) { s.memcpy_async(DevicePtr(0), src_.data(), 2048); }

  static constexpr std::size_t kBytes = 4096;
  std::optional<Device> dev_;
  PinnedBuffer src_, dst_;
};

// The start event is recorded on an idle stream whose last job ended long before: its time is
// the record, not that job's end (the upper bound fails by the idle gap otherwise). The end
// event's job waits on the device: its time is that job's end, not the record (the lower
// bound) and not when the host asks (the upper bound: asked after a pause).
TEST_P(EventTiming, ElapsedSpansTheWorkBetweenTheEventsAndNothingElse) {
  Stream s = dev().create_stream();
  copy(s);
  s.synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the idle gap

  Event start, stop;
  const std::int64_t before_start = now_ns();
  start.record(s);
  const std::int64_t after_start = now_ns();
  slow_down(s);
  copy(s);
  stop.record(s);
  const bool pending = !stop.query();
  const std::int64_t seen_pending = now_ns();
  EXPECT_FALSE(Event::elapsed(start, stop).has_value()) << "elapsed before the end event completed";
  if (emu()) {
    EXPECT_TRUE(pending);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  release(s);
  stop.synchronize();
  const std::int64_t after_stop = now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // asking late changes nothing

  const auto d = Event::elapsed(start, stop);
  ASSERT_TRUE(d.has_value());
  std::printf("elapsed %.3f ms; host window %.3f ms; end seen pending %.3f ms after start\n",
              d->count() / 1e6, (after_stop - before_start) / 1e6, (seen_pending - after_start) / 1e6);
  EXPECT_LE(d->count(), after_stop - before_start) << "longer than the host's window around both events";
  if (pending) {
    EXPECT_GE(d->count(), seen_pending - after_start) << "the end event's time precedes its job's end";
  }
  EXPECT_EQ(Event::elapsed(start, start).value().count(), 0);
  EXPECT_EQ(Event::elapsed(stop, start).value().count(), -d->count());
}

// Each recording keeps its own point's time while the stream moves on: the stream's timeline
// forgets old points, and an event whose time followed the timeline would read a later job's.
TEST_P(EventTiming, EachEventKeepsItsOwnPointsTimeAsTheStreamMovesOn) {
  Stream s = dev().create_stream();
  Event first, second, third;
  first.record(s);
  slow_down(s);
  copy(s);
  second.record(s);
  copy(s);
  copy(s);
  third.record(s);
  if (emu()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release(s);
  s.synchronize();

  const auto a = Event::elapsed(first, second).value();
  const auto b = Event::elapsed(second, third).value();
  std::printf("first->second %.3f ms, second->third %.3f ms\n", a.count() / 1e6, b.count() / 1e6);
  EXPECT_GT(a.count(), 0);
  EXPECT_GT(b.count(), 0) << "the second event took the third's time";
  EXPECT_EQ(Event::elapsed(first, third).value(), a + b);
}

// An event recorded after Stream::wait(e) completes when e does too: its time is not before.
TEST_P(EventTiming, AnEventAfterAWaitIsNotEarlierThanWhatItWaitedFor) {
  Stream producer = dev().create_stream();
  Stream consumer = dev().create_stream();
  Event start, produced, consumed;
  start.record(producer);
  slow_down(producer);
  copy(producer);
  produced.record(producer);
  consumer.wait(produced);
  consumed.record(consumer);  // nothing submitted on consumer: only the wait orders it
  if (emu()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release(producer);
  consumed.synchronize();
  EXPECT_GE(Event::elapsed(produced, consumed).value().count(), 0);
  EXPECT_GT(Event::elapsed(start, consumed).value().count(), 0);
}

TEST_P(EventTiming, UntimedAndUnrecordedEventsAreRefused) {
  Stream s = dev().create_stream();
  Event timed, untimed(EventFlags::DisableTiming | EventFlags::BlockingSync), never;
  EXPECT_FALSE(untimed.timing());
  timed.record(s);
  untimed.record(s);
  EXPECT_THROW(Event::elapsed(timed, untimed), InvalidArgument);
  EXPECT_THROW(Event::elapsed(untimed, timed), InvalidArgument);
  EXPECT_THROW(Event::elapsed(timed, never), InvalidArgument);
  EXPECT_THROW(Event(static_cast<EventFlags>(8)), InvalidArgument);
  Event copy = untimed;
  EXPECT_FALSE(copy.timing());
  copy = timed;
  EXPECT_TRUE(copy.timing());
  EXPECT_EQ(Event::elapsed(copy, timed).value().count(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, EventTiming, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

// The C API: CUDA's codes (c_api_fixture.hpp selects the backend and device 0).
class CEventTiming : public CApiBackendTest {};

TEST_P(CEventTiming, ElapsedTimeAndItsErrors) {
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  void *src = nullptr, *dst = nullptr;
  ASSERT_EQ(hrtMallocHost(&src, 4096), hrtSuccess);
  ASSERT_EQ(hrtMallocHost(&dst, 4096), hrtSuccess);
  hrtEvent_t a = nullptr, b = nullptr, untimed = nullptr, never = nullptr;
  ASSERT_EQ(hrtEventCreate(&a), hrtSuccess);
  ASSERT_EQ(hrtEventCreateWithFlags(&b, hrtEventBlockingSync), hrtSuccess);
  ASSERT_EQ(hrtEventCreateWithFlags(&untimed, hrtEventDisableTiming), hrtSuccess);
  ASSERT_EQ(hrtEventCreate(&never), hrtSuccess);
  hrtEvent_t bad = nullptr;
  EXPECT_EQ(hrtEventCreateWithFlags(&bad, 8), hrtErrorInvalidValue);
  EXPECT_EQ(hrtEventCreateWithFlags(&bad, hrtEventInterprocess | hrtEventDisableTiming),
            hrtErrorNotSupported);

  ASSERT_EQ(hrtEventRecord(a, s), hrtSuccess);
  ASSERT_EQ(hrtMemcpyAsync(dst, src, 4096, hrtMemcpyHostToHost, s), hrtSuccess);
  ASSERT_EQ(hrtEventRecord(b, s), hrtSuccess);
  ASSERT_EQ(hrtEventRecord(untimed, s), hrtSuccess);
  float ms = -1;
  const hrtError_t early = hrtEventElapsedTime(&ms, a, b);
  EXPECT_TRUE(early == hrtErrorNotReady || early == hrtSuccess) << hrtGetErrorName(early);
  ASSERT_EQ(hrtEventSynchronize(b), hrtSuccess);
  ASSERT_EQ(hrtEventElapsedTime(&ms, a, b), hrtSuccess);
  EXPECT_GE(ms, 0.0f);
  float back = 1;
  ASSERT_EQ(hrtEventElapsedTime(&back, b, a), hrtSuccess);
  EXPECT_FLOAT_EQ(back, -ms);
  EXPECT_EQ(hrtEventElapsedTime(nullptr, a, b), hrtErrorInvalidValue);
  EXPECT_EQ(hrtEventElapsedTime(&ms, a, untimed), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtEventElapsedTime(&ms, never, b), hrtErrorInvalidResourceHandle);

  for (hrtEvent_t e : {a, b, untimed, never}) EXPECT_EQ(hrtEventDestroy(e), hrtSuccess);
  EXPECT_EQ(hrtEventElapsedTime(&ms, a, b), hrtErrorInvalidResourceHandle);
  EXPECT_EQ(hrtFreeHost(src), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(dst), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, CEventTiming, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
