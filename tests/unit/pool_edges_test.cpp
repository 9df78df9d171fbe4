// The pool's edges (issue 13): errors as the standard library and CUDA users expect them,
// limits under concurrency, device resets and closes, thread and process exit, the default
// pool, pointer attributes of blocks.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "detail/access.hpp"
#include "detail/c_api_support.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "fail_nth_allocation.hpp"
#include "hostrt/hostrt.h"
#include "hostrt/hostrt_pool.h"
#include "hostrt/pool.hpp"
#include "pool_fakes.hpp"

namespace hostrt::test {
namespace {

using detail::pool::PoolCore;

// PoolOutOfMemory is a std::bad_alloc (std::pmr containers and code written for operator new
// expect one) and a hostrt::Error, and catch (std::exception&) still matches it unambiguously.
// Before, it was a std::runtime_error only: catch (std::bad_alloc&) missed it.
TEST(PoolErrorTest, PoolOutOfMemoryIsABadAllocAndAHostrtErrorAndAStdException) {
  auto c = std::make_shared<SourceCounters>();
  auto owned = detail::Access::pool(std::make_unique<FakeSource>(c), PoolOptions{.max_bytes = 4 << 20});
  Pool& pool = *owned;
  int as_bad_alloc = 0, as_error = 0, as_exception = 0, as_out_of_memory = 0;
  try {
    (void)pool.allocate(8 << 20);
  } catch (const std::bad_alloc& e) {
    ++as_bad_alloc;
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
    EXPECT_NE(dynamic_cast<const PoolOutOfMemory*>(&e), nullptr);
  }
  try {
    (void)pool.allocate(8 << 20);
  } catch (const Error& e) {
    ++as_error;
    EXPECT_EQ(e.error_code(), ENOMEM);
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
  }
  try {
    (void)pool.allocate(8 << 20);
  } catch (const std::exception& e) {
    ++as_exception;
    EXPECT_NE(std::string(e.what()).find("max_bytes"), std::string::npos) << e.what();
  }
  try {
    (void)pool.allocate(8 << 20);
  } catch (const OutOfMemory& e) {
    ++as_out_of_memory;
  }
  EXPECT_EQ(as_bad_alloc + as_error + as_exception + as_out_of_memory, 4);
  static_assert(std::is_base_of_v<std::bad_alloc, PoolOutOfMemory>);
  static_assert(std::is_base_of_v<std::exception, PoolOutOfMemory>);
  static_assert(std::is_convertible_v<PoolOutOfMemory*, std::exception*>, "one std::exception base");
  static_assert(std::is_convertible_v<PoolOutOfMemory*, Error*>);
  // The rest of the hierarchy keeps its shape: one std::exception, not a bad_alloc.
  static_assert(std::is_convertible_v<DeviceLost*, std::exception*>);
  static_assert(std::is_convertible_v<DeviceLost*, std::runtime_error*>);
  static_assert(!std::is_base_of_v<std::bad_alloc, DeviceLost>);
  static_assert(std::is_convertible_v<WrongDevice*, InvalidArgument*>);
  try {
    throw_errno(EPROTO, "a protocol error");
  } catch (const std::exception& e) {
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr) << "an unmapped errno is still a hostrt::Error";
  }
}

// ---- fault injection: fail_nth_allocation.hpp, armed per thread -------------------------

// deallocate changes nothing before its last fallible step: whichever allocation inside it
// fails, the block is still allocated, the statistics are as before, and the free can be
// retried. Before, a failure to queue the pending free (std::bad_alloc from the queue's
// growth) came after the thread's counters and the block's uses were committed: allocated
// dropped by the block, and the block was lost to both the caller and the pool.
TEST(PoolEdgeTest, AFailedDeallocateCommitsNothing) {
  auto c = std::make_shared<SourceCounters>();
  auto pool = make_fake_pool(c, PoolOptions{.thread_cache_bytes = 0});
  std::vector<std::unique_ptr<FakeStream>> streams;
  int failures = 0;
  for (long n = 0;; ++n) {
    // Fresh streams each round: the pending queue of a stream never seen needs memory.
    FakeStream& s = *streams.emplace_back(std::make_unique<FakeStream>(2 * n + 1));
    FakeStream& other = *streams.emplace_back(std::make_unique<FakeStream>(2 * n + 2));
    void* p = pool->allocate(1000, s.ref());
    pool->record_stream(p, other.ref());
    s.submit();
    other.submit();
    const PoolStats before = pool->stats();
    bool threw = false;
    {
      FailNthAllocation f(n);
      try {
        pool->deallocate(p, s.ref());
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      if (!f.fired()) {
        ASSERT_FALSE(threw);
      }
    }
    if (!threw) {
      EXPECT_EQ(pool->stats().pending_free_bytes, 1024u);
      s.complete_all();
      other.complete_all();
      pool->synchronize();
      break;
    }
    ++failures;
    const PoolStats after = pool->stats();
    EXPECT_EQ(after.allocated_bytes, before.allocated_bytes) << "allocation " << n;
    EXPECT_EQ(after.requested_bytes, before.requested_bytes) << "allocation " << n;
    EXPECT_EQ(after.deallocations, before.deallocations) << "allocation " << n;
    EXPECT_EQ(after.pending_free_bytes, 0u) << "allocation " << n;
    EXPECT_EQ(pool->block_size(p), 1024u) << "the block must still be allocated";
    // The retry must still wait for both streams (the recorded one included).
    pool->deallocate(p, s.ref());
    EXPECT_EQ(pool->stats().pending_free_bytes, 1024u);
    s.complete_all();
    EXPECT_EQ(pool->stats().pending_free_bytes, 1024u) << "the recorded stream was forgotten";
    other.complete_all();
    pool->synchronize();
    EXPECT_EQ(pool->stats().pending_free_bytes, 0u);
    ASSERT_LT(n, 100);
  }
  EXPECT_GT(failures, 1) << "the test never failed the queueing step";
  const PoolStats end = pool->stats();
  EXPECT_EQ(end.allocated_bytes, 0u);
  EXPECT_EQ(end.reserved_bytes, end.free_bytes + end.cached_bytes);
}

// max_bytes is a hard limit: threads that miss together must not each pass the check and
// grow (before, the room was computed under the lock and the segment added after the driver
// call, so two racing growths both fit and reserved went past the limit). A slow "driver"
// widens the window.
TEST(PoolEdgeTest, MaxBytesHoldsWhenThreadsGrowTogether) {
  auto c = std::make_shared<SourceCounters>();
  c->delay_us = 2000;
  const std::size_t limit = 8u << 20, block = (3u << 20) / 2;  // 1.5 MiB: a dedicated segment each
  auto pool = make_fake_pool(c, PoolOptions{.max_bytes = limit, .thread_cache_bytes = 0});
  std::atomic<std::size_t> oom{0};
  for (int round = 0; round < 4; ++round) {
    std::vector<std::thread> threads;
    std::vector<std::vector<void*>> held(4);
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (;;) {
          try {
            held[t].push_back(pool->allocate(block, {}));
          } catch (const PoolOutOfMemory&) {
            ++oom;
            return;
          }
        }
      });
    for (auto& th : threads) th.join();
    EXPECT_LE(pool->stats().peak_reserved_bytes, limit) << "round " << round;
    for (auto& v : held)
      for (void* p : v) pool->deallocate(p, {});
    pool->trim(0);
  }
  EXPECT_EQ(oom.load(), 16u);
  std::lock_guard lk(c->mu);
  EXPECT_LE(c->peak_live_bytes, limit);
}

// A thread that only frees returns its cache after trim(): trim bumps the flush epoch, the
// thread's next free sees it and drains. Before, the free went to the arena and the cache
// kept its blocks until the thread's next allocation (or exit), so trim could not release
// the segment they pinned.
TEST(PoolEdgeTest, AThreadThatOnlyFreesDrainsItsCacheAfterTrim) {
  auto c = std::make_shared<SourceCounters>();
  auto pool = make_fake_pool(c);
  std::mutex m;
  std::condition_variable cv;
  int step = 0;
  auto wait_for = [&](int want) {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return step >= want; });
  };
  auto advance = [&] {
    {
      std::lock_guard lk(m);
      ++step;
    }
    cv.notify_all();
  };
  std::thread worker([&] {
    std::vector<void*> v;
    for (int i = 0; i < 4; ++i) v.push_back(pool->allocate(1000, {}));
    for (int i = 0; i < 3; ++i) pool->deallocate(v[i], {});  // parked in this thread's cache
    advance();                                               // step 1
    wait_for(2);
    pool->deallocate(v[3], {});  // the only call after trim: a free
    advance();                   // step 3
    wait_for(4);
  });
  wait_for(1);
  // Three parked, and the block the worker's second arena allocation carved ahead.
  EXPECT_EQ(pool->stats().cached_bytes, 4 * 1024u);
  EXPECT_EQ(pool->trim(0), 0u) << "the worker holds one block and caches four";
  advance();  // step 2
  wait_for(3);
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.cached_bytes, 0u) << "the worker kept its cache after trim()";
  EXPECT_EQ(pool->trim(0), std::size_t{2} << 20);
  advance();  // step 4
  worker.join();
}

// Static and thread_local objects that free pool memory at exit (a static std::pmr::vector on
// a static pool; a thread_local one made before its thread first used the pool): the frees
// come after the thread's own pool state is destroyed. Before, each freed through the
// destroyed per-thread state and the process died with SIGSEGV at exit.
std::string exit_status(const char* mode) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDOUT_FILENO);
    execl(HOSTRT_POOL_EXIT_HELPER, HOSTRT_POOL_EXIT_HELPER, mode, static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid) return "fork/wait failed";
  if (WIFSIGNALED(st)) return std::string("killed by signal ") + strsignal(WTERMSIG(st));
  return "exit " + std::to_string(WEXITSTATUS(st));
}

TEST(PoolExitTest, StaticContainersFreeAtProcessExit) { EXPECT_EQ(exit_status("static"), "exit 0"); }

TEST(PoolExitTest, ThreadLocalContainersFreeAtThreadAndProcessExit) {
  EXPECT_EQ(exit_status("thread_local"), "exit 0");
}

// The frees of an exited thread go through the pool's exit cache: counted, and reusable.
TEST(PoolExitTest, AThreadsLastFreesAfterItsCacheIsGoneAddUp) {
  auto c = std::make_shared<SourceCounters>();
  auto pool = make_fake_pool(c);
  struct FreesAtExit {
    PoolCore* pool = nullptr;
    std::vector<void*> blocks;
    ~FreesAtExit() {
      for (void* p : blocks) pool->deallocate(p, {});
      pool->trim(0);  // a whole-pool call from an exited thread, too
    }
  };
  std::thread t([&] {
    thread_local FreesAtExit late;  // constructed before the thread's first pool call
    late.pool = pool.get();
    for (int i = 0; i < 10; ++i) late.blocks.push_back(pool->allocate(100 + 1000 * i, {}));
  });
  t.join();
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.requested_bytes, 0u);
  EXPECT_EQ(st.allocations, 10u);
  EXPECT_EQ(st.deallocations, 10u);
  EXPECT_EQ(st.reserved_bytes, 0u) << "the exited thread's trim() released the segment";
}

// trim(), stats() and set_retain_bytes() race the warm allocate/free paths (and the
// pending path on a stream with unfinished work) of several threads. Run under TSan by
// unit.tsan; on every build it checks that no block is handed out twice (each owner's tag
// survives until its free) and that the statistics add up once the threads are done.
TEST(PoolRaceTest, TrimStatsAndRetainBytesRaceTheWarmPaths) {
  auto c = std::make_shared<SourceCounters>();
  auto pool = make_fake_pool(c, PoolOptions{.min_segment_bytes = 256 << 10});
  constexpr int kWorkers = 3, kSteps = 20000;
  FakeStream s(1);
  std::atomic<bool> stop{false};
  std::atomic<int> corrupt{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w)
    workers.emplace_back([&, w] {
      std::mt19937 rng(static_cast<unsigned>(w) * 7919u + 1);
      std::vector<std::pair<unsigned char*, std::size_t>> held;
      for (int i = 0; i < kSteps; ++i) {
        if (held.size() < 16 && (held.empty() || rng() % 2 == 0)) {
          const std::size_t n = 64u << (rng() % 7);  // 64 B .. 4 KiB: the indexed bins
          auto* p = static_cast<unsigned char*>(pool->allocate(n, {}));
          std::memset(p, w + 1, n);
          held.emplace_back(p, n);
        } else {
          const std::size_t k = rng() % held.size();
          auto [p, n] = held[k];
          held[k] = held.back();
          held.pop_back();
          if (p[0] != w + 1 || p[n - 1] != w + 1) ++corrupt;
          if (i % 16 == 0) {
            s.submit();  // unfinished work: this free goes pending
            pool->deallocate(p, s.ref());
          } else {
            pool->deallocate(p, {});
          }
        }
      }
      for (auto [p, n] : held) pool->deallocate(p, {});
    });
  std::thread control([&] {
    std::mt19937 rng(42);
    while (!stop.load()) {
      switch (rng() % 4) {
        case 0:
          (void)pool->trim(rng() % 2 == 0 ? 0 : std::size_t{1} << 20);
          break;
        case 1: {
          const PoolStats st = pool->stats();
          if (st.reserved_bytes > st.peak_reserved_bytes) ++corrupt;
          break;
        }
        case 2:
          pool->set_retain_bytes(rng() % 2 == 0 ? 0 : std::size_t{512} << 10);
          break;
        default:
          s.complete_all();
          break;
      }
    }
  });
  for (auto& t : workers) t.join();
  stop = true;
  control.join();
  s.complete_all();
  pool->synchronize();
  EXPECT_EQ(corrupt.load(), 0);
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.pending_free_bytes, 0u);
  EXPECT_EQ(st.reserved_bytes, st.free_bytes + st.cached_bytes);
  EXPECT_EQ(st.allocations, st.deallocations);
}

// ---- on runtime devices (Emulated) ---------------------------------------------------------

class PoolDeviceEdgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("HOSTRT_BACKEND", "emulated", 1);
    if (Device::count(Backend::Emulated) < 2) GTEST_SKIP() << "needs two emulated devices";
    ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
  }
  void TearDown() override { hrtSetDevice(0); }
};

// hrtDeviceReset with a live pool, a block on the default stream, one whose free is pending
// and one without a stream: frees after the reset succeed (NULL meaning the pool's own
// device's default stream), allocations are refused with a typed error, and the statistics
// add up. Before, the reset destroyed the default stream the block's free then read:
// hrtPoolFree failed with hrtErrorUnknown (std::bad_weak_ptr), and the block never came back.
TEST_F(PoolDeviceEdgeTest, DeviceResetWithLivePoolsAndPendingFrees) {
  hrtPool_t pool = nullptr;
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtPoolCreate(&pool, nullptr, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  void *a = nullptr, *b = nullptr, *c = nullptr, *d = nullptr;
  ASSERT_EQ(hrtPoolMallocAsync(pool, &a, 1000, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolMallocAsync(pool, &b, 2000, s), hrtSuccess);
  ASSERT_EQ(hrtPoolMalloc(pool, &c, 3000), hrtSuccess);
  ASSERT_EQ(hrtPoolMallocAsync(pool, &d, 4000, nullptr), hrtSuccess);
  detail::EmulatedBackend* emu = detail::emulated_backend(
      detail::Access::device(hostrt::detail::Access::core(detail::capi::stream_of(s))->device()));
  ASSERT_NE(emu, nullptr);
  const std::uint32_t q = hostrt::detail::Access::core(detail::capi::stream_of(s))->queue_id();
  const std::uint32_t q_null = hostrt::detail::Access::core(detail::capi::stream_of(nullptr))->queue_id();
  emu->hold_queue(q, true);
  emu->hold_queue(q_null, true);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), b, 2000, hrtMemcpyHostToDevice, s), hrtSuccess);
  ASSERT_EQ(hrtPoolFreeAsync(pool, b, s), hrtSuccess);  // pending: the copy is held
  // Work on the default stream still queued at the reset: a's free must wait for it.
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), a, 1000, hrtMemcpyHostToDevice, nullptr), hrtSuccess);

  ASSERT_EQ(hrtDeviceReset(), hrtSuccess);
  EXPECT_EQ(hrtPoolFree(pool, a), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtPoolFreeAsync(pool, c, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtPoolFreeAsync(pool, d, s), hrtSuccess) << hrtGetLastErrorMessage();
  void* x = nullptr;
  EXPECT_EQ(hrtPoolMallocAsync(pool, &x, 64, nullptr), hrtErrorDeviceLost) << hrtGetLastErrorMessage();
  EXPECT_EQ(hrtPoolMalloc(pool, &x, 64), hrtErrorDeviceLost);
  hrtPoolStats st{};
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 0u);
  EXPECT_EQ(st.pendingFreeBytes, 1024u + 2048u + 3008u + 4032u)
      << "a, c wait for the default stream, b, d for s";

  emu->hold_queue(q, false);
  emu->hold_queue(q_null, false);
  emu->wait_until_stalled();
  EXPECT_EQ(hrtPoolSynchronize(pool), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolGetStats(pool, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 0u);
  EXPECT_EQ(st.requestedBytes, 0u);
  EXPECT_EQ(st.pendingFreeBytes, 0u);
  EXPECT_EQ(st.allocations, 4u);
  EXPECT_EQ(st.deallocations, 4u);
  EXPECT_EQ(st.reservedBytes, st.freeBytes + st.cachedBytes);
  EXPECT_EQ(hrtStreamDestroy(s), hrtSuccess);
  EXPECT_EQ(hrtPoolDestroy(pool), hrtSuccess);
  // The next call opens the device again.
  ASSERT_EQ(hrtPoolCreate(&pool, nullptr, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolMallocAsync(pool, &x, 64, nullptr), hrtSuccess);
  EXPECT_EQ(hrtPoolFreeAsync(pool, x, nullptr), hrtSuccess);
  EXPECT_EQ(hrtPoolDestroy(pool), hrtSuccess);
}

// A stream of another device is refused with WrongDevice (C: hrtErrorWrongDevice) for
// allocate, deallocate and record_stream, and by a memory resource on such a stream; a pool
// whose device was closed refuses allocations with DeviceLost, the thread cache's warm path
// included, while frees of its blocks still work. Before, all of these were accepted.
TEST_F(PoolDeviceEdgeTest, StreamsOfAnotherDeviceAndClosedDevicesAreRefused) {
  Device d0 = Device::open(0, Backend::Emulated), d1 = Device::open(1, Backend::Emulated);
  Stream s0 = d0.create_stream(), s1 = d1.create_stream();
  Pool pool(d0);
  EXPECT_THROW((void)pool.allocate(64, s1), WrongDevice);
  void* p = pool.allocate(64, s0);
  EXPECT_THROW(pool.deallocate(p, s1), WrongDevice);
  EXPECT_THROW(pool.record_stream(p, s1), WrongDevice);
  try {
    pool.deallocate(p, s1);
  } catch (const WrongDevice& e) {
    EXPECT_NE(std::string(e.what()).find("device 1"), std::string::npos) << e.what();
    EXPECT_EQ(e.error_code(), EXDEV);
  }
  PoolMemoryResource mr(pool, &s1);
  EXPECT_THROW((void)mr.allocate(64), WrongDevice);
  void* cached = pool.allocate(128, s0);
  pool.deallocate(cached, s0);  // parked in this thread's cache: the warm path would reuse it
  EXPECT_EQ(pool.stats().cached_bytes, 128u);

  d0.close();
  EXPECT_THROW((void)pool.allocate(128, s0), DeviceLost) << "the thread cache served a closed device";
  EXPECT_THROW((void)pool.allocate(64), DeviceLost);
  EXPECT_THROW(pool.reserve(0, 1 << 20), DeviceLost);
  EXPECT_NO_THROW(pool.deallocate(p, s0)) << "frees still work";
  EXPECT_THROW((void)pool.allocate(64, s0), DeviceLost) << "nor after a free";
  const PoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(pool.trim(), st.reserved_bytes);
  EXPECT_THROW(Pool{d0}, DeviceLost);

  // C: hrtErrorWrongDevice.
  hrtStream_t c0 = nullptr, c1 = nullptr;
  hrtPool_t cp = nullptr;
  ASSERT_EQ(hrtStreamCreate(&c0), hrtSuccess);
  ASSERT_EQ(hrtSetDevice(1), hrtSuccess);
  ASSERT_EQ(hrtStreamCreate(&c1), hrtSuccess);
  ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
  ASSERT_EQ(hrtPoolCreate(&cp, c0, nullptr), hrtSuccess);
  void* q = nullptr;
  EXPECT_EQ(hrtPoolMallocAsync(cp, &q, 64, c1), hrtErrorWrongDevice);
  EXPECT_NE(std::string(hrtGetLastErrorMessage()).find("another device"), std::string::npos)
      << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolMallocAsync(cp, &q, 64, c0), hrtSuccess);
  EXPECT_EQ(hrtPoolFreeAsync(cp, q, c1), hrtErrorWrongDevice);
  EXPECT_EQ(hrtPoolRecordStream(cp, q, c1), hrtErrorWrongDevice);
  EXPECT_EQ(hrtPoolFreeAsync(cp, q, c0), hrtSuccess);
  EXPECT_EQ(hrtPoolDestroy(cp), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(c0), hrtSuccess);
  EXPECT_EQ(hrtStreamDestroy(c1), hrtSuccess);
}

// The attributes of a pool block describe the block as its user allocated it (start, the
// size asked for, the offset into it), not the pool's segment around it; before, base and
// size were the segment's (2 MiB) and offset the block's place in it.
TEST_F(PoolDeviceEdgeTest, PointerAttributesOfAPoolBlockDescribeTheBlock) {
  Device d = Device::open(0, Backend::Emulated);
  Stream s = d.create_stream();
  Pool pool(d);
  void* first = pool.allocate(5000, s);
  auto* p = static_cast<char*>(pool.allocate(1000, s));
  const PointerAttributes a = pointer_attributes(p + 100);
  EXPECT_EQ(a.type, MemoryType::Pinned);
  EXPECT_EQ(a.base, p);
  EXPECT_EQ(a.size, 1000u);
  EXPECT_EQ(a.offset, 100u);
  EXPECT_EQ(pointer_attributes(p).offset, 0u);
  EXPECT_EQ(pointer_attributes(first).size, 5000u);
  hrtPointerAttributes c{};
  ASSERT_EQ(hrtPointerGetAttributes(&c, p + 999), hrtSuccess);
  EXPECT_EQ(c.type, hrtMemoryTypePinned);
  EXPECT_EQ(c.base, p);
  EXPECT_EQ(c.size, 1000u);
  EXPECT_EQ(c.offset, 999u);
  pool.deallocate(p, s);
  pool.deallocate(first, s);
  // Memory of the pool that no one holds is described as the pool's pinned segment.
  const PointerAttributes f = pointer_attributes(p);
  EXPECT_EQ(f.type, MemoryType::Pinned);
  EXPECT_GE(f.size, std::size_t{2} << 20);
}

// ---- the device's default pool (cudaMallocAsync) ------------------------------------------

TEST_F(PoolDeviceEdgeTest, DeviceDefaultAndCurrentPool) {
  std::weak_ptr<detail::DeviceCore> internals;
  {
    Device d0 = Device::open(0, Backend::Emulated), d1 = Device::open(1, Backend::Emulated);
    internals = hostrt::detail::Access::core(d0);
    Stream s = d0.create_stream();
    Pool& dp = d0.default_pool();
    EXPECT_EQ(&dp, &d0.default_pool());
    EXPECT_EQ(&d0.mem_pool(), &dp);
    EXPECT_EQ(&detail::Access::device(hostrt::detail::Access::core(d0)).default_pool(), &dp)
        << "one per device, not per handle";
    void* p = d0.malloc_async(1000, s);
    EXPECT_EQ(dp.stats().allocated_bytes, 1024u);
    EXPECT_EQ(pointer_attributes(p).size, 1000u);
    Device::free_async(p, s);
    EXPECT_EQ(dp.stats().allocated_bytes, 0u);
    {
      Pool mine(d0);
      d0.set_mem_pool(mine);
      EXPECT_EQ(&d0.mem_pool(), &mine);
      void* q = d0.malloc_async(64, s);
      EXPECT_EQ(mine.stats().allocated_bytes, 64u);
      EXPECT_EQ(dp.stats().allocated_bytes, 0u);
      Device::free_async(q, s);
      EXPECT_EQ(mine.stats().allocated_bytes, 0u);
      Pool other(d1);
      EXPECT_THROW(d0.set_mem_pool(other), WrongDevice);
      Stream s1 = d1.create_stream();
      void* r = d0.malloc_async(64, s);
      EXPECT_THROW(Device::free_async(r, s1), WrongDevice);
      Device::free_async(r, s);
      EXPECT_THROW((void)d0.malloc_async(64, s1), WrongDevice);
    }
    EXPECT_EQ(&d0.mem_pool(), &dp) << "a destroyed pool stops being the device's pool";
    int not_pool = 0;
    EXPECT_THROW(Device::free_async(&not_pool, s), InvalidArgument);
    // Blocks still held when the last handle goes are the user's loss, as with any pool; a
    // pending free keeps the internals alive until it is reclaimed.
    void* last = d0.malloc_async(4000, s);
    s.memcpy_async(DevicePtr(0), last, 4000);
    Device::free_async(last, s);
    s.synchronize();
    d0.default_pool().synchronize();
  }
  EXPECT_TRUE(internals.expired()) << "the default pool kept its device's internals alive";
}

TEST_F(PoolDeviceEdgeTest, CMallocAsyncFreeAsyncAndTheDevicesPools) {
  hrtPool_t dp = nullptr, cur = nullptr, mine = nullptr, other = nullptr;
  hrtStream_t s = nullptr;
  ASSERT_EQ(hrtStreamCreate(&s), hrtSuccess);
  ASSERT_EQ(hrtDeviceGetDefaultMemPool(&dp, 0), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtDeviceGetMemPool(&cur, 0), hrtSuccess);
  EXPECT_EQ(cur, dp);
  void *p = nullptr, *q = nullptr;
  ASSERT_EQ(hrtMallocAsync(&p, 1000, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  hrtPoolStats st{};
  ASSERT_EQ(hrtPoolGetStats(dp, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 1024u);
  EXPECT_EQ(hrtFreeAsync(p, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtPoolGetStats(dp, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 0u);
  EXPECT_EQ(hrtPoolDestroy(dp), hrtErrorInvalidValue) << "the default pool cannot be destroyed";

  ASSERT_EQ(hrtPoolCreate(&mine, s, nullptr), hrtSuccess);
  ASSERT_EQ(hrtDeviceSetMemPool(0, mine), hrtSuccess) << hrtGetLastErrorMessage();
  ASSERT_EQ(hrtDeviceGetMemPool(&cur, 0), hrtSuccess);
  EXPECT_EQ(cur, mine);
  ASSERT_EQ(hrtMallocAsync(&q, 64, s), hrtSuccess);
  ASSERT_EQ(hrtPoolGetStats(mine, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 64u);
  EXPECT_EQ(hrtFreeAsync(q, s), hrtSuccess);
  ASSERT_EQ(hrtPoolGetStats(mine, &st), hrtSuccess);
  EXPECT_EQ(st.allocatedBytes, 0u);
  ASSERT_EQ(hrtPoolDestroy(mine), hrtSuccess);
  ASSERT_EQ(hrtDeviceGetMemPool(&cur, 0), hrtSuccess);
  EXPECT_EQ(cur, dp) << "a destroyed pool stops being the device's pool";

  ASSERT_EQ(hrtSetDevice(1), hrtSuccess);
  ASSERT_EQ(hrtPoolCreate(&other, nullptr, nullptr), hrtSuccess);
  ASSERT_EQ(hrtSetDevice(0), hrtSuccess);
  EXPECT_EQ(hrtDeviceSetMemPool(0, other), hrtErrorWrongDevice);
  EXPECT_EQ(hrtPoolDestroy(other), hrtSuccess);
  int not_pool = 0;
  EXPECT_EQ(hrtFreeAsync(&not_pool, nullptr), hrtErrorInvalidValue);
  EXPECT_EQ(hrtFreeAsync(nullptr, nullptr), hrtSuccess);
  EXPECT_EQ(hrtDeviceGetDefaultMemPool(&cur, 99), hrtErrorInvalidDevice);

  // A reset leaves the default pool's blocks valid and freeable; its handle goes with the
  // device (as cudaDeviceReset's), and the closed device's internals (file, queues, engine)
  // once the last block is back: each reset with a block out used to keep them for good.
  void* r = nullptr;
  ASSERT_EQ(hrtMallocAsync(&r, 100, nullptr), hrtSuccess);
  ASSERT_EQ(hrtStreamDestroy(s), hrtSuccess);
  const std::weak_ptr<detail::DeviceCore> closed =
      hostrt::detail::Access::core(*detail::capi::current_device());
  Pool* closed_pool = detail::find_pool(r);
  ASSERT_NE(closed_pool, nullptr);
  ASSERT_EQ(hrtDeviceReset(), hrtSuccess);
  EXPECT_EQ(hrtPoolGetStats(dp, &st), hrtErrorInvalidResourceHandle);
  EXPECT_FALSE(closed.expired()) << "its block is still out";
  EXPECT_EQ(hrtFreeAsync(r, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  EXPECT_TRUE(closed.expired()) << "the closed device's internals outlived its last block";
  EXPECT_EQ(detail::find_pool(r), nullptr);
  ASSERT_EQ(hrtDeviceGetDefaultMemPool(&cur, 0), hrtSuccess);
  EXPECT_NE(cur, dp);
  ASSERT_EQ(hrtMallocAsync(&r, 100, nullptr), hrtSuccess);
  EXPECT_EQ(hrtFreeAsync(r, nullptr), hrtSuccess);
  // Reset with nothing allocated: the default pool's handle goes with the device.
  ASSERT_EQ(hrtDeviceReset(), hrtSuccess);
  EXPECT_EQ(hrtPoolGetStats(cur, &st), hrtErrorInvalidResourceHandle);
}

// hrtMallocAsync on the NULL stream, work still queued there, hrtDeviceReset, then
// hrtFreeAsync: the default pool's handle (made by hrtMallocAsync) holds the default stream,
// so the free waits for that work instead of reading a destroyed stream.
TEST_F(PoolDeviceEdgeTest, DefaultPoolBlocksOnTheNullStreamSurviveAReset) {
  void* r = nullptr;
  ASSERT_EQ(hrtMallocAsync(&r, 1000, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  hostrt::Stream& null_stream = detail::capi::stream_of(nullptr);
  detail::EmulatedBackend* emu =
      detail::emulated_backend(detail::Access::device(hostrt::detail::Access::core(null_stream)->device()));
  ASSERT_NE(emu, nullptr);
  const std::uint32_t q = hostrt::detail::Access::core(null_stream)->queue_id();
  emu->hold_queue(q, true);
  ASSERT_EQ(hrtMemcpyAsync(hrtDevicePtr(0), r, 1000, hrtMemcpyHostToDevice, nullptr), hrtSuccess);
  ASSERT_EQ(hrtDeviceReset(), hrtSuccess);
  EXPECT_EQ(hrtFreeAsync(r, nullptr), hrtSuccess) << hrtGetLastErrorMessage();
  Pool* owner = detail::find_pool(r);
  ASSERT_NE(owner, nullptr);
  EXPECT_EQ(owner->stats().pending_free_bytes, 1024u) << "the free waits for the queued copy";
  emu->hold_queue(q, false);
  emu->wait_until_stalled();
  owner->synchronize();
  const PoolStats st = owner->stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.pending_free_bytes, 0u);
  EXPECT_EQ(st.allocations, st.deallocations);
}

// A stream whose completion check blocks until opened: the pool calls it holding its arena
// lock, so a thread in it holds that lock for as long as the test wants.
class GateStream : public detail::pool::StreamIdentity {
 public:
  GateStream() : StreamIdentity(777) {}
  detail::pool::StreamRef ref() { return {this, &kOps}; }
  std::atomic<bool> inside{false}, open{false};

 private:
  static const detail::pool::StreamOps kOps;
};
const detail::pool::StreamOps GateStream::kOps = {
    [](const detail::pool::StreamIdentity*) noexcept { return std::uint64_t{1}; },
    [](detail::pool::StreamIdentity* s, detail::pool::WaitList& waits, detail::pool::KeepList&) {
      waits.push_back({static_cast<GateStream*>(s)->ref(), 1});
    },
    [](const detail::pool::StreamIdentity* s, std::uint64_t) noexcept {
      auto* g = const_cast<GateStream*>(static_cast<const GateStream*>(s));
      g->inside = true;
      while (!g->open.load()) std::this_thread::yield();
      return true;
    },
    [](detail::pool::StreamIdentity*, std::uint64_t) {},
    [](const detail::pool::StreamIdentity*) { return std::shared_ptr<const void>(); },
    [](std::uint64_t, std::shared_ptr<const void>&) { return detail::pool::StreamRef{}; },
};

// fork() while another thread holds the pool's arena lock, then a child that leaves with
// exit(): its thread-exit code must release nothing of the parent's pools (the lock is held
// by a thread the child does not have). Before, the child hung at exit in retire(). Not run
// under TSan (a multi-threaded fork's child there runs the sanitizer's own exit work).
TEST(PoolForkExitTest, AChildThatCallsExitTakesNoLockOfTheParentsPools) {
  auto src = std::make_shared<SourceCounters>();
  auto pool = make_fake_pool(src, PoolOptions{.thread_cache_bytes = 0});
  pool->deallocate(pool->allocate(64, {}), {});  // this thread's cache link: retired at its exit
  GateStream gate;
  std::thread holder([&] {
    void* p = pool->allocate(64, gate.ref());
    pool->deallocate(p, gate.ref());  // pending: the reclaim under the arena lock asks the gate
  });
  while (!gate.inside.load()) std::this_thread::yield();
  const pid_t pid = fork();
  if (pid == 0) std::exit(0);  // runs this thread's thread_local destructors: the pool's retire
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {  // 30 s
    done = waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  gate.open = true;
  holder.join();
  EXPECT_NE(done, 0) << "the child hung in exit(), on a lock a parent thread held at fork";
  EXPECT_TRUE(WIFEXITED(status));
}

}  // namespace
}  // namespace hostrt::test
