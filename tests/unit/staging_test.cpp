// Pageable copies are staged through pinned memory that must not be handed to another copy
// while the job using it is still queued, and a large copy goes through a bounded ring of
// chunks instead of pinning its whole size (Emulated on the host, Drm in the VM).
#include "detail/staging.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class StagingTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    device = std::make_unique<Device>(Device::open(0, GetParam()));
  }
  std::unique_ptr<Device> device;
};

// A staged copy queued behind an event on a held stream, its stream destroyed at once: the
// staging memory must stay out of reach of the next pageable copy until the job has run.
// Before, the bounce buffer went back to the free list as soon as its stream was gone, the
// next copy wrote its own bytes into it, and the queued job carried those to the device.
TEST_P(StagingTest, StagingIsNotReusedWhileItsJobIsQueuedBehindAnEvent) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  if (emu == nullptr) GTEST_SKIP() << "needs the emulated engine's queue hold to queue a job behind an event";
  Stream gate = device->create_stream(), other = device->create_stream();
  auto s = std::make_unique<Stream>(device->create_stream());
  emu->hold_queue(hostrt::detail::Access::core(gate)->queue_id(), true);
  const std::vector<unsigned char> tag = pattern(16, 9);
  gate.memcpy_async(DevicePtr(4000), tag.data(), tag.size());
  Event e;
  e.record(gate);
  s->wait(e);
  std::vector<unsigned char> a = pattern(1000, 1);
  s->memcpy_async(DevicePtr(0), a.data(), a.size());  // staged; the job waits for `gate`
  s.reset();                                          // the stream goes while its job is queued
  const std::vector<unsigned char> b = pattern(1000, 2);
  other.memcpy_async(DevicePtr(2000), b.data(), b.size());
  emu->hold_queue(hostrt::detail::Access::core(gate)->queue_id(), false);
  emu->wait_until_stalled();  // everything has run, the destroyed stream's job included
  std::vector<unsigned char> back(1000);
  other.memcpy_async(back.data(), DevicePtr(0), back.size());
  EXPECT_EQ(first_diff(back.data(), a.data(), a.size()), -1) << "the queued job's staging was overwritten";
  other.memcpy_async(back.data(), DevicePtr(2000), back.size());
  EXPECT_EQ(first_diff(back.data(), b.data(), b.size()), -1);
}

// A pageable copy larger than the ring pins no more than the ring, and arrives intact.
TEST_P(StagingTest, ALargePageableCopyGoesThroughABoundedRing) {
  Stream s = device->create_stream();
  const std::size_t n = detail::Staging::kRingBytes * 5 / 2 + 123;
  const std::vector<unsigned char> src = pattern(n, 5);
  std::vector<unsigned char> dst(n);
  const std::uint64_t before = device->pinned_bytes();
  s.memcpy_async(dst.data(), src.data(), n, CopyKind::H2H);  // pageable -> pageable
  EXPECT_EQ(first_diff(dst.data(), src.data(), n), -1);
  EXPECT_LE(device->pinned_bytes() - before, detail::Staging::kRingBytes);
  // Pageable -> pinned and pinned -> pageable, chunk by chunk, and a source the caller may
  // reuse at once.
  PinnedBuffer pin = device->host_alloc(n);
  std::vector<unsigned char> v = pattern(n, 6);
  s.memcpy_async(pin.data(), v.data(), n, CopyKind::H2H);
  fill(v.data(), n, 7);
  std::fill(dst.begin(), dst.end(), 0);
  s.memcpy_async(dst.data(), pin.data(), n, CopyKind::H2H);
  EXPECT_EQ(first_diff(dst.data(), pattern(n, 6).data(), n), -1);
  s.synchronize();
}

// Several threads copying into pageable memory on one stream (the NULL stream of a threaded
// program): each holds a full staging chunk while it waits for its job to read the bytes out.
// With the stream's work held back, the fifth thread found all four chunks of the ring held
// and nothing pending, and its copy failed with PoolOutOfMemory.
TEST_P(StagingTest, ConcurrentPageableCopiesOnOneStreamNeverFailForStaging) {
  detail::EmulatedBackend* emu = detail::emulated_backend(*device);
  Stream s = device->create_stream();
  const std::size_t n = detail::Staging::kChunkBytes;
  PinnedBuffer src = device->host_alloc(n);
  fill(src.data(), n, 11);
  PinnedBuffer slow_src = device->host_alloc(4096), slow_dst = device->host_alloc(4096);
  if (emu != nullptr) {
    emu->hold_queue(hostrt::detail::Access::core(s)->queue_id(), true);
  } else {
    // ~100 ms per edu transfer: the copies below queue behind it.
    s.memcpy_async(slow_dst.data(), slow_src.data(), 4096, CopyKind::H2H);
  }
  // One more than the ring's chunks (each copy of the driver's takes seconds: no more there).
  const int threads_n = static_cast<int>(detail::Staging::kRingBytes / n) + (emu != nullptr ? 3 : 1);
  std::vector<std::vector<unsigned char>> out(threads_n, std::vector<unsigned char>(n));
  std::atomic<int> failed{0}, started{0};
  std::string error;
  std::mutex error_m;
  std::vector<std::thread> threads;
  for (int t = 0; t < threads_n; ++t) {
    threads.emplace_back([&, t] {
      ++started;
      try {
        s.memcpy_async(out[t].data(), src.data(), n, CopyKind::H2H);  // pinned -> pageable: staged
      } catch (const std::exception& e) {
        ++failed;
        std::lock_guard lk(error_m);
        error = e.what();
      }
    });
  }
  if (emu != nullptr) {
    while (started.load() < threads_n) std::this_thread::yield();
    emu->wait_until_stalled();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the late ones reach acquire
    emu->hold_queue(hostrt::detail::Access::core(s)->queue_id(), false);
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0) << error;
  for (int t = 0; t < threads_n; ++t)
    EXPECT_EQ(first_diff(out[t].data(), src.data(), n), -1) << "thread " << t;
  s.synchronize();
}

INSTANTIATE_TEST_SUITE_P(Backends, StagingTest, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
