// Multi-threaded stress of the pool on a device: threads share one pool, each with its own
// stream, and free every block right after queueing the copy that reads it (stream-ordered
// free), then at once allocate and scribble over a block of the same size. A pool that hands
// out memory the device has not finished reading shows up as a corrupted copy.
//
// Emulated on the host; the real driver in the VM (2 vCPUs in the smp2 configuration, where
// each edu DMA takes 100 ms, hence far fewer rounds there). The seed is printed and can be
// replayed with HOSTRT_STRESS_SEED.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hostrt/hostrt.hpp"
#include "hostrt/pool.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class PoolDeviceStressTest : public ::testing::TestWithParam<Backend> {};

int rounds_for(Backend b) {
  if (b == Backend::Emulated) return 400;
  const char* icount = std::getenv("VM_ICOUNT");
  return icount && std::string(icount) == "off" ? 6 : 30;
}

TEST_P(PoolDeviceStressTest, ThreadsWithOwnStreamsNeverSeeReusedMemory) {
  SKIP_WITHOUT_DEVICE(GetParam());
  const char* env = std::getenv("HOSTRT_STRESS_SEED");
  const unsigned seed = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  SCOPED_TRACE("HOSTRT_STRESS_SEED=" + std::to_string(seed));
  Device device = Device::open(0, GetParam());
  Pool pool(device);
  const int threads = 2, rounds = rounds_for(GetParam());
  std::atomic<int> corrupted{0}, errors{0};
  std::vector<std::string> messages(threads);

  auto worker = [&](int t) {
    try {
      Stream s = device.create_stream();
      std::mt19937 rng(seed + static_cast<unsigned>(t));
      for (int r = 0; r < rounds; ++r) {
        const std::size_t n = 64 + rng() % 4000;
        auto* src = static_cast<unsigned char*>(pool.allocate(n, s));
        auto* dst = static_cast<unsigned char*>(pool.allocate(n, s));
        const unsigned pattern = seed ^ static_cast<unsigned>(t * 100000 + r);
        fill(src, n, pattern);
        const std::vector<unsigned char> want(src, src + n);
        std::memset(dst, 0, n);
        s.memcpy_async(dst, src, n, CopyKind::H2H);
        pool.deallocate(src, s);  // the copy above still reads it
        auto* scribble = static_cast<unsigned char*>(pool.allocate(n, s));
        std::memset(scribble, 0xEE, n);
        s.synchronize();
        if (std::memcmp(dst, want.data(), n) != 0) ++corrupted;
        pool.deallocate(dst, s);
        pool.deallocate(scribble, s);
      }
      pool.synchronize();
    } catch (const std::exception& e) {
      ++errors;
      messages[static_cast<std::size_t>(t)] = e.what();
    }
  };
  std::vector<std::thread> pool_threads;
  for (int t = 0; t < threads; ++t) pool_threads.emplace_back(worker, t);
  for (auto& th : pool_threads) th.join();
  for (const auto& m : messages) EXPECT_TRUE(m.empty()) << m;
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(corrupted.load(), 0) << "copies that saw a block reused too early, of " << threads * rounds;
  const PoolStats st = pool.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolDeviceStressTest, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
