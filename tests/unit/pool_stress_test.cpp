// Multi-threaded stress: several threads allocate, fill, "submit" work on shared streams,
// hand blocks to each other and free them on various streams, while a device thread completes
// the work in order. Every block carries its owner's pattern; a block handed out twice, or
// reused while the device still uses it, shows up as a pattern mismatch or a live overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "pool_fakes.hpp"

namespace hostrt::test {
namespace {

struct InFlight {  // a block the "device" still reads: it must keep its pattern until done
  const unsigned char* p;
  std::size_t n;
  unsigned char tag;
  FakeStream* stream;
  std::uint64_t point;
};

class PoolStressTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(PoolStressTest, ThreadsStreamsAndCrossThreadFreesKeepDataIntact) {
  auto src = std::make_shared<SourceCounters>();
  PoolOptions o;
  o.thread_cache_bytes = GetParam();
  auto pool = make_fake_pool(src, o);
  constexpr int kThreads = 4, kStreams = 3, kSteps = 6000;
  std::vector<std::unique_ptr<FakeStream>> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_unique<FakeStream>(10 + i));

  std::mutex mu;  // guards handoff and inflight
  std::deque<std::pair<void*, std::size_t>> handoff;
  std::vector<InFlight> inflight;
  std::atomic<bool> stop{false};
  std::atomic<int> corrupt{0};
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("HOSTRT_POOL_SEED=" + std::to_string(seed));

  // The device: checks that memory it still "uses" is intact, then completes jobs in order.
  std::thread device([&] {
    std::mt19937 rng(static_cast<unsigned>(seed));
    while (!stop.load()) {
      {
        std::lock_guard lk(mu);
        for (auto it = inflight.begin(); it != inflight.end();) {
          if (it->stream->completed() >= it->point) {
            it = inflight.erase(it);
            continue;
          }
          // Both ends of the block: a wrongful reuser's memset covers all of it, and checking
          // every byte here, under the lock, would starve the workers (worse under TSan).
          const std::size_t k = std::min<std::size_t>(it->n, 64);
          for (std::size_t i = 0; i < k; ++i)
            if (it->p[i] != it->tag || it->p[it->n - 1 - i] != it->tag) {
              ++corrupt;
              break;
            }
          ++it;
        }
      }
      FakeStream& s = *streams[rng() % kStreams];
      if (s.completed() < s.submitted()) s.complete_to(s.completed() + 1);
      std::this_thread::yield();
    }
  });

  auto worker = [&](int id) {
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(id) * 7919);
    struct Mine {
      void* p;
      std::size_t n;
      unsigned char tag;
    };
    std::vector<Mine> mine;
    auto check_and_free = [&](const Mine& m, FakeStream* on) {
      const auto* b = static_cast<const unsigned char*>(m.p);
      for (std::size_t i = 0; i < m.n; ++i)
        if (b[i] != m.tag) {
          ++corrupt;
          break;
        }
      pool->deallocate(m.p, on != nullptr ? on->ref() : detail::pool::StreamRef{});
    };
    for (int step = 0; step < kSteps; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op < 4 || mine.empty()) {
        const std::size_t n = rng() % 4 == 0 ? (std::size_t{1} << (6 + rng() % 14)) + 1 : 1 + rng() % 3000;
        void* p = pool->allocate(n, {});
        const auto tag = static_cast<unsigned char>(1 + rng() % 255);
        std::memset(p, tag, n);
        mine.push_back({p, n, tag});
      } else if (op < 7) {
        // Submit a job reading the block on a stream, then free it on that stream at once.
        const Mine m = mine.back();
        mine.pop_back();
        FakeStream& s = *streams[rng() % kStreams];
        {
          std::lock_guard lk(mu);
          inflight.push_back({static_cast<const unsigned char*>(m.p), m.n, m.tag, &s, s.submit()});
        }
        check_and_free(m, &s);
      } else if (op < 9) {
        const Mine m = mine.back();
        mine.pop_back();
        std::lock_guard lk(mu);
        handoff.emplace_back(m.p, m.n | (std::size_t{m.tag} << 56));
      } else {
        std::pair<void*, std::size_t> h{nullptr, 0};
        {
          std::lock_guard lk(mu);
          if (!handoff.empty()) {
            h = handoff.front();
            handoff.pop_front();
          }
        }
        if (h.first != nullptr)
          check_and_free(
              {h.first, h.second & ((std::size_t{1} << 56) - 1), static_cast<unsigned char>(h.second >> 56)},
              nullptr);
      }
    }
    for (const Mine& m : mine) check_and_free(m, nullptr);
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  for (auto& [p, n] : handoff) pool->deallocate(p, {});
  stop = true;
  device.join();

  EXPECT_EQ(corrupt.load(), 0) << "a block was handed out while still live or in use by the device";
  pool->synchronize();
  pool->flush_thread_cache();  // this thread freed the leftovers; the workers have exited
  const PoolStats st = pool->stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.cached_bytes, 0u) << "exited threads returned their caches";
  EXPECT_EQ(st.pending_free_bytes, 0u);
  EXPECT_EQ(st.allocations, st.deallocations);
  EXPECT_EQ(st.reserved_bytes, st.free_bytes);
  pool->trim(0);
  EXPECT_EQ(src->live_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(CacheSizes, PoolStressTest, ::testing::Values(std::size_t{4} << 20, std::size_t{0}),
                         [](const auto& info) {
                           return info.param ? std::string("Cached") : std::string("Uncached");
                         });

}  // namespace
}  // namespace hostrt::test
