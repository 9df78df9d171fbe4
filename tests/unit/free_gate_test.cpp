// FreeGate (hrtFreeAsync's guard against a retired pool's destruction): what runs closed never
// overlaps a reader inside, and readers wait while it runs. The sleeps only give a broken gate
// the chance to show; a correct one passes however the threads are scheduled.
#include "detail/free_gate.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace hostrt::test {
namespace {

using detail::FreeGate;
using namespace std::chrono_literals;

TEST(FreeGate, ClosingWaitsForAReaderInside) {
  FreeGate gate;
  std::atomic<bool> inside{false}, ran{false}, ran_while_inside{false};
  std::thread reader([&] {
    const FreeGate::Inside in(gate);
    inside = true;
    std::this_thread::sleep_for(50ms);  // the closer is waiting by now (or the gate is broken)
    ran_while_inside = ran.load();
  });
  while (!inside) std::this_thread::yield();
  gate.closed([&] { ran = true; });
  reader.join();
  EXPECT_TRUE(ran);
  EXPECT_FALSE(ran_while_inside) << "a pool was destroyed under a free still inside it";
}

TEST(FreeGate, AReaderWaitsWhileItIsClosed) {
  FreeGate gate;
  std::atomic<bool> closing{false}, entered{false}, entered_while_closed{false};
  std::thread closer([&] {
    gate.closed([&] {
      closing = true;
      std::this_thread::sleep_for(50ms);
      entered_while_closed = entered.load();
    });
  });
  while (!closing) std::this_thread::yield();
  {
    const FreeGate::Inside in(gate);
    entered = true;
  }
  closer.join();
  EXPECT_FALSE(entered_while_closed) << "a free went in while a pool was being destroyed";
}

// Many readers (more threads than the gate has slots share some) against repeated closing:
// while closed, nobody is inside. TSan checks the orderings.
TEST(FreeGate, NoReaderIsEverInsideWhileClosed) {
  FreeGate gate;
  std::atomic<int> inside{0};
  std::atomic<bool> stop{false};
  std::atomic<long> violations{0}, closings{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 6; ++t)
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        const FreeGate::Inside in(gate);
        inside.fetch_add(1);
        inside.fetch_sub(1);
      }
    });
  for (int i = 0; i < 2000; ++i)
    gate.closed([&] {
      if (inside.load() != 0) ++violations;
      ++closings;
    });
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(closings.load(), 2000);
  EXPECT_EQ(violations.load(), 0);
}

}  // namespace
}  // namespace hostrt::test
