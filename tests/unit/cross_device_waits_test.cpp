// Waits across devices (cudaStreamWaitEvent on an event of another device) on both backends:
// device 1's stream waits for device 0's event, so it reads what device 0 wrote into portable
// memory only once written. On the driver the event's fence crosses as a sync_file; on the
// emulated backend a relay thread signals device 1's engine.
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "c_api_fixture.hpp"
#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/pool.hpp"
#include "test_util.hpp"
#include "two_devices.hpp"

namespace hostrt::test {
namespace {

class CrossDeviceWait : public TwoDevices {};

TEST_P(CrossDeviceWait, AStreamReadsWhatAnotherDeviceWroteOnlyAfterItsEvent) {
  const std::size_t n = 4000;
  PinnedBuffer shared = d0().host_alloc(n, kHostAllocPortable);
  std::memset(shared.data(), 0, n);
  PinnedBuffer src = d0().host_alloc(n);
  fill(src.data(), n, 31);
  PinnedBuffer out = d1().host_alloc(n);
  Stream s0 = d0().create_stream(), s1 = d1().create_stream();
  detail::EmulatedBackend* emu0 = detail::emulated_backend(d0());
  if (emu0) {
    emu0->hold_queue(hostrt::detail::Access::core(s0)->queue_id(), true);
  } else {  // device 0's write comes after a longer copy
    PinnedBuffer a = d0().host_alloc(64u << 10), b = d0().host_alloc(64u << 10);
    s0.memcpy_async(b.data(), a.data(), a.size(), CopyKind::H2H);
  }
  s0.memcpy_async(DevicePtr(0), src.data(), n);
  s0.memcpy_async(shared.data(), DevicePtr(0), n);  // device 0 produces
  Event produced;
  produced.record(s0);
  s1.wait(produced);
  s1.memcpy_async(DevicePtr(0), shared.data(), n);  // device 1 consumes
  s1.memcpy_async(out.data(), DevicePtr(0), n);
  if (emu0) {
    // A relay that did not wait for device 0 would have signalled within the pause; a
    // correct one never does while device 0 is held, whatever the timing.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    detail::emulated_backend(d1())->wait_until_stalled();
    EXPECT_FALSE(s1.query()) << "device 1 ran before device 0's event";
    emu0->hold_queue(hostrt::detail::Access::core(s0)->queue_id(), false);
  }
  s1.synchronize();
  EXPECT_TRUE(produced.query()) << "device 1 finished before the event it waited for";
  EXPECT_EQ(first_diff(out.data(), src.data(), n), -1) << "device 1 read the buffer before device 0 wrote it";
}

// A free on device 1's stream after it waited for device 0's event is ordered after that
// event too: the pool must not hand out the block while device 0 still writes it.
TEST_P(CrossDeviceWait, AFreeAfterAWaitAlsoWaitsForTheOtherDevice) {
  detail::EmulatedBackend* emu0 = detail::emulated_backend(d0());
  if (!emu0) GTEST_SKIP() << "needs the emulated engine's queue hold";
  Pool pool(d0(), PoolOptions{.thread_cache_bytes = 0});
  pool.set_access(d1(), true);
  Stream s0 = d0().create_stream(), s1 = d1().create_stream();
  void* p = pool.allocate(4000, s1);
  emu0->hold_queue(hostrt::detail::Access::core(s0)->queue_id(), true);
  s0.memcpy_async(p, DevicePtr(0), 4000);
  Event e;
  e.record(s0);
  s1.wait(e);
  pool.deallocate(p, s1);
  void* q = pool.allocate(4000, s1);
  EXPECT_NE(q, p) << "reused while device 0 was still to write it";
  emu0->hold_queue(hostrt::detail::Access::core(s0)->queue_id(), false);
  s0.synchronize();
  pool.deallocate(q, s1);
}

// More of another device's streams than one job may name in-syncs (MAX_SYNCS): the waits
// beyond it are host-waits, which must use each waited stream's own device (its file's
// syncobjs; this device's file knows none of them). The producers are held (Emulated) or
// behind a copy through the device (Drm) while the consumer submits.
TEST_P(CrossDeviceWait, EventsOfMoreOfAnotherDevicesStreamsThanOneJobMayNameAreAllWaitedFor) {
  const unsigned max = d0().capabilities().max_syncs;
  ASSERT_LE(max + 4, d1().capabilities().max_queues - 1) << "too few queues for the test";
  detail::EmulatedBackend* emu1 = detail::emulated_backend(d1());
  PinnedBuffer a = d1().host_alloc(4096), b = d1().host_alloc(4096);
  std::vector<Stream> producers;
  std::vector<Event> events(max + 4);
  for (auto& e : events) {
    Stream& p = producers.emplace_back(d1().create_stream());
    if (emu1) emu1->hold_queue(hostrt::detail::Access::core(p)->queue_id(), true);
    p.memcpy_async(b.data(), a.data(), 4096, CopyKind::H2H);
    e.record(p);
  }
  Stream consumer = d0().create_stream();
  for (auto& e : events) consumer.wait(e);
  std::thread releaser([&] {  // the consumer's submit host-waits for some of them
    if (!emu1) return;
    emu1->wait_until_stalled();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto& p : producers) emu1->hold_queue(hostrt::detail::Access::core(p)->queue_id(), false);
  });
  const std::size_t n = 1000;
  PinnedBuffer in = d0().host_alloc(n), out = d0().host_alloc(n);
  fill(in.data(), n, 5);
  EXPECT_NO_THROW({
    consumer.memcpy_async(DevicePtr(0), in.data(), n);
    consumer.memcpy_async(out.data(), DevicePtr(0), n);
    consumer.synchronize();
  });
  releaser.join();
  EXPECT_EQ(first_diff(out.data(), in.data(), n), -1);
  for (std::size_t i = 0; i < events.size(); ++i)
    EXPECT_TRUE(events[i].query()) << "the consumer ran before device 1's event " << i;
}

// The waited device closed (hrtDeviceReset) after the wait was queued: its queued work still
// runs and is still waited for, and the waiting stream goes on working (before: every later
// submit of the stream failed with DeviceLost, the wait staying queued).
TEST_P(CrossDeviceWait, ClosingTheWaitedDeviceDoesNotWedgeTheWaitingStream) {
  Stream s0 = d0().create_stream(), s1 = d1().create_stream();
  PinnedBuffer a = d0().host_alloc(64u << 10), b = d0().host_alloc(64u << 10);
  detail::EmulatedBackend* emu0 = detail::emulated_backend(d0());
  if (emu0) emu0->hold_queue(hostrt::detail::Access::core(s0)->queue_id(), true);
  s0.memcpy_async(b.data(), a.data(), emu0 ? 4000 : a.size(), CopyKind::H2H);
  Event e;
  e.record(s0);
  s1.wait(e);
  d0().close();
  PinnedBuffer x = d1().host_alloc(4096);
  EXPECT_NO_THROW(s1.memcpy_async(DevicePtr(0), x.data(), 64));
  EXPECT_NO_THROW(s1.memcpy_async(DevicePtr(0), x.data(), 64));
  if (emu0) emu0->hold_queue(hostrt::detail::Access::core(s0)->queue_id(), false);
  EXPECT_NO_THROW(s1.synchronize());
}

class CCrossDeviceWait : public CApiBackendTest {};

TEST_P(CCrossDeviceWait, StreamWaitEventAcceptsAnotherDevicesEvent) {
  int n = 0;
  ASSERT_EQ(hrtGetDeviceCount(&n), hrtSuccess);
  if (n < 2) GTEST_SKIP() << "needs two devices";
  hrtStream_t s0 = nullptr, s1 = nullptr;
  hrtEvent_t e = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s0), hrtSuccess);
  ASSERT_EQ(hrtEventCreate(&e), hrtSuccess);
  void* p = nullptr;
  ASSERT_EQ(hrtHostAlloc(&p, 4096, hrtHostAllocPortable), hrtSuccess);
  fill(p, 4000, 37);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), p, 4000, hrtMemcpyHostToDevice, s0), hrtSuccess);
  ASSERT_EQ(hrtEventRecord(e, s0), hrtSuccess);
  ASSERT_EQ(hrtSetDevice(1), hrtSuccess);
  ASSERT_EQ(hrtStreamCreate(&s1), hrtSuccess);
  EXPECT_EQ(hrtStreamWaitEvent(s1, e, 0), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), p, 4000, hrtMemcpyHostToDevice, s1), hrtSuccess);
  EXPECT_EQ(hrtStreamSynchronize(s1), hrtSuccess);
  EXPECT_EQ(hrtEventQuery(e), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s1), hrtSuccess);
  ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(s0), hrtSuccess);
  EXPECT_EQ(hrtEventDestroy(e), hrtSuccess);
  EXPECT_EQ(hrtFreeHost(p), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, CrossDeviceWait, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, CCrossDeviceWait, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
