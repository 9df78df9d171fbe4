// PendingFrees on its own: the per-stream queues of blocks freed while device work may still
// use them.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "detail/pool/pending.hpp"
#include "pool_fakes.hpp"

namespace hostrt::test {
namespace {

using detail::pool::Block;
using detail::pool::PendingFrees;

// A program that makes a stream per task frees on a new stream each time: the queue of each
// must go once it empties (before, one stayed per stream ever freed on, and every slow path
// scanned them all).
TEST(PendingFrees, AQueueGoesWhenItsLastBlockIsReclaimed) {
  PendingFrees pending;
  std::vector<std::unique_ptr<Block>> blocks;
  for (std::uint64_t id = 1; id <= 50; ++id) {
    FakeStream s(7000 + id);
    const std::uint64_t point = s.submit();
    auto& b = blocks.emplace_back(std::make_unique<Block>());
    b->size = 64;
    b->side_record().waits.push_back({s.ref(), point});
    pending.add(b.get());
    EXPECT_EQ(pending.queues(), 1u);
    s.complete_all();
    std::vector<std::shared_ptr<const void>> released;
    std::size_t ready = 0;
    EXPECT_EQ(pending.reclaim([&](Block*) { ++ready; }, released), 1u);
    EXPECT_EQ(ready, 1u);
    EXPECT_EQ(pending.queues(), 0u) << "stream " << s.id() << "'s empty queue stayed";
  }
  EXPECT_TRUE(pending.empty());
}

}  // namespace
}  // namespace hostrt::test
