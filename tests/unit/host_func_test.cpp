// Host functions (cudaLaunchHostFunc): run once the stream reached them, in order, and
// everything ordered after them on the stream waits for them. Both backends; on Drm a slow
// copy (edu takes ~100 ms of guest time per transfer) stands in for the emulated backend's
// held queue.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "c_api_fixture.hpp"
#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/pool.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

using std::chrono::milliseconds;

class HostFunc : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    dev_.emplace(Device::open(0, GetParam()));
    src_ = dev().host_alloc(kBytes);
    dst_ = dev().host_alloc(kBytes);
  }
  Device& dev() { return *dev_; }
  detail::EmulatedBackend* emu() { return detail::emulated_backend(dev()); }

  // Queues a copy that cannot end yet (Emulated: its queue is held until release()) or ends
  // late (Drm: a 4096-byte staged copy, two edu transfers).
  std::uint64_t slow_copy(Stream& s) {
    if (emu()) emu()->hold_queue(hostrt::detail::Access::core(s)->queue_id(), true);
    s.memcpy_async(dst_.data(), src_.data(), kBytes, CopyKind::H2H);
    return s.last_submitted();
  }
  void release(Stream& s) {
    if (emu()) emu()->hold_queue(hostrt::detail::Access::core(s)->queue_id(), false);
  }

  static constexpr std::size_t kBytes = 4096;
  std::optional<Device> dev_;
  PinnedBuffer src_, dst_;
};

// Each function sees the work before it ended, and they run in launch order.
TEST_P(HostFunc, RunsOnceTheWorkBeforeItEndedInLaunchOrder) {
  Stream s = dev().create_stream();
  const std::uint64_t copy = slow_copy(s);
  std::mutex m;
  std::vector<int> order;
  std::vector<bool> saw_copy_end;
  for (int i = 0; i < 3; ++i)
    s.launch_host_func([&, i] {
      std::lock_guard lk(m);
      order.push_back(i);
      saw_copy_end.push_back(s.reached(copy));
    });
  if (emu()) {
    emu()->wait_until_stalled();
    std::this_thread::sleep_for(milliseconds(20));
    std::lock_guard lk(m);
    EXPECT_TRUE(order.empty()) << "a host function ran before the held copy ended";
  }
  EXPECT_FALSE(s.query()) << "query() while host functions are queued";
  release(s);
  s.synchronize();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(saw_copy_end, (std::vector<bool>{true, true, true}));
  EXPECT_TRUE(s.query());
}

// A copy launched after a host function reads what the function wrote: it is not on the
// device before the function returned (it would copy the old bytes).
TEST_P(HostFunc, ACopyAfterAFunctionSeesWhatTheFunctionWrote) {
  Stream s = dev().create_stream();
  auto* in = static_cast<unsigned char*>(src_.data());
  auto* out = static_cast<unsigned char*>(dst_.data());
  std::memset(in, 0x11, kBytes);
  std::memset(out, 0, kBytes);
  std::atomic<bool> returned{false};
  s.launch_host_func([&] {
    std::this_thread::sleep_for(milliseconds(50));
    std::memset(in, 0x77, kBytes);
    returned = true;
  });
  s.memcpy_async(out, in, kBytes, CopyKind::H2H);
  EXPECT_TRUE(returned.load()) << "memcpy_async returned before the function before it did";
  s.synchronize();
  const std::vector<unsigned char> want(kBytes, 0x77);
  EXPECT_EQ(first_diff(out, want.data(), kBytes), -1) << "the copy ran before the function";
}

// An event recorded after a function completes only once the function returned.
TEST_P(HostFunc, AnEventAfterAFunctionCompletesAfterIt) {
  Stream s = dev().create_stream();
  slow_copy(s);
  std::atomic<bool> returned{false};
  s.launch_host_func([&] {
    std::this_thread::sleep_for(milliseconds(20));
    returned = true;
  });
  std::thread releaser([&] {
    std::this_thread::sleep_for(milliseconds(20));
    release(s);
  });
  Event e;
  e.record(s);  // waits for the function: the device cannot
  EXPECT_TRUE(returned.load());
  e.synchronize();
  releaser.join();
}

// A block freed on the stream after a function that reads it is not handed out again before
// the function returned: the function would read another owner's bytes.
TEST_P(HostFunc, AStreamOrderedFreeAfterAFunctionWaitsForIt) {
  Pool pool(dev());
  Stream s = dev().create_stream();
  const std::size_t n = 1024;
  auto* p = static_cast<unsigned char*>(pool.allocate(n, s));
  std::memset(p, 0x5A, n);
  std::atomic<long> bad{-2};
  s.launch_host_func([&] {
    std::this_thread::sleep_for(milliseconds(50));
    long first = -1;
    for (std::size_t i = 0; i < n && first < 0; ++i)
      if (p[i] != 0x5A) first = static_cast<long>(i);
    bad = first;
  });
  pool.deallocate(p, s);
  auto* q = static_cast<unsigned char*>(pool.allocate(n, s));
  std::memset(q, 0xEE, n);  // the next owner's bytes
  s.synchronize();
  EXPECT_EQ(bad.load(), -1) << "the function read the block after it was handed out again";
  pool.deallocate(q, s);
}

// As in CUDA, a function must not use its own stream: it would wait for itself. It gets an
// error instead of a deadlock; other streams are fine.
TEST_P(HostFunc, AFunctionUsingItsOwnStreamGetsAnErrorNotADeadlock) {
  Stream s = dev().create_stream();
  Stream other = dev().create_stream();
  std::atomic<int> own_errno{0};
  std::atomic<bool> other_ok{false};
  s.launch_host_func([&] {
    try {
      s.memcpy_async(dst_.data(), src_.data(), 64, CopyKind::H2H);
    } catch (const InvalidArgument& e) {
      own_errno = e.error_code();
    }
    try {
      s.synchronize();
    } catch (const InvalidArgument&) {
    }
    other.memcpy_async(dst_.data(), src_.data(), 64, CopyKind::H2H);
    other.synchronize();
    other_ok = true;
  });
  s.synchronize();
  EXPECT_EQ(own_errno.load(), EDEADLK);
  EXPECT_TRUE(other_ok.load());
}

// What a function throws comes back from the stream's next ordering call, once.
TEST_P(HostFunc, AnExceptionFromAFunctionIsRethrownOnce) {
  Stream s = dev().create_stream();
  s.launch_host_func([] { throw std::runtime_error("from the host function"); });
  EXPECT_THROW(s.synchronize(), std::runtime_error);
  EXPECT_NO_THROW(s.synchronize());
  EXPECT_THROW(s.launch_host_func(nullptr), InvalidArgument);
}

// Destroying a stream runs what is queued on it first; the function may even drop the last
// handle of its own stream.
TEST_P(HostFunc, DestroyingTheStreamRunsItsQueuedFunctions) {
  std::atomic<int> ran{0};
  {
    Stream s = dev().create_stream();
    s.memcpy_async(dst_.data(), src_.data(), kBytes, CopyKind::H2H);
    for (int i = 0; i < 3; ++i) s.launch_host_func([&] { ++ran; });
    s.destroy();
  }
  EXPECT_EQ(ran.load(), 3);

  auto held = std::make_shared<Stream>(dev().create_stream());
  std::atomic<bool> done{false};
  held->launch_host_func([&done, held]() mutable {
    held.reset();  // not the last reference yet: the caller's goes below
    done = true;
  });
  held.reset();  // the function's copy may now be the stream's last handle
  for (int i = 0; i < 5000 && !done; ++i) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_TRUE(done.load());
}

INSTANTIATE_TEST_SUITE_P(Backends, HostFunc, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

// The C API: CUDA's codes (c_api_fixture.hpp selects the backend and device 0).
class CHostFunc : public CApiBackendTest {};

struct Calls {
  std::atomic<int> n{0};
  std::atomic<int> own_stream_status{-1};
  hrtStream_t stream = nullptr;
};

TEST_P(CHostFunc, LaunchHostFuncOnAStreamAndTheDefaultStream) {
  Calls calls;
  ASSERT_EQ(hrtStreamCreate(&calls.stream), hrtSuccess);
  EXPECT_EQ(hrtLaunchHostFunc(calls.stream, nullptr, nullptr), hrtErrorInvalidValue);
  auto count = [](void* p) { ++static_cast<Calls*>(p)->n; };
  auto own = [](void* p) {
    auto* c = static_cast<Calls*>(p);
    c->own_stream_status = hrtStreamSynchronize(c->stream);
  };
  ASSERT_EQ(hrtLaunchHostFunc(calls.stream, count, &calls), hrtSuccess);
  ASSERT_EQ(hrtLaunchHostFunc(calls.stream, own, &calls), hrtSuccess);
  ASSERT_EQ(hrtLaunchHostFunc(nullptr, count, &calls), hrtSuccess);
  ASSERT_EQ(hrtStreamSynchronize(calls.stream), hrtSuccess);
  ASSERT_EQ(hrtDeviceSynchronize(), hrtSuccess);
  EXPECT_EQ(calls.n.load(), 2);
  EXPECT_EQ(calls.own_stream_status.load(), hrtErrorInvalidValue);
  EXPECT_EQ(hrtStreamDestroy(calls.stream), hrtSuccess);
}

INSTANTIATE_TEST_SUITE_P(Backends, CHostFunc, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
