#include "detail/pool/pending.hpp"

#include <algorithm>

namespace hostrt::detail::pool {

void PendingFrees::add(Block* b, bool retained) {
  // b->side->keeps may already hold the references collect() took for points on other streams.
  const std::size_t kept = b->side->keeps.size();
  try {
    if (!retained) retain_waits(*b->side);
    b->pending_seq = seq_ + 1;
    // Strong: a new (empty) queue may stay behind, which is harmless; the block is queued or
    // not (std::deque's insert has no effect when it throws for a nothrow-copyable element).
    enqueue(b);
  } catch (...) {
    b->side->keeps.resize(kept);
    throw;
  }
  ++seq_;
  b->set_state(BlockState::Pending);
  bytes_ += b->size;
  ++blocks_;
}

void PendingFrees::enqueue(Block* b) {
  const StreamPoint& w = b->side->waits.back();
  Queue& q = queues_[w.stream.key()];
  if (q.blocks.empty()) {
    q.keep = w.stream.retain();
    q.stream = w.stream;
  }
  // Frees on one stream arrive in point order except when two threads race, or a block
  // arrives from another stream's queue; keep the queue sorted so its head is always the
  // first to complete.
  if (q.blocks.empty() || q.blocks.back()->side->waits.back().point <= w.point) {
    q.blocks.push_back(b);
    return;
  }
  auto pos = std::upper_bound(q.blocks.begin(), q.blocks.end(), w.point, [](std::uint64_t p, const Block* x) {
    return p < x->side->waits.back().point;
  });
  q.blocks.insert(pos, b);
}

std::optional<HeldPoint> PendingFrees::oldest() const {
  const Queue* best = nullptr;
  for (const auto& [key, q] : queues_)
    if (!q.blocks.empty() &&
        (best == nullptr || q.blocks.front()->pending_seq < best->blocks.front()->pending_seq))
      best = &q;
  if (best == nullptr) return std::nullopt;
  return HeldPoint{best->blocks.front()->side->waits.back(), best->keep};
}

std::vector<HeldPoint> PendingFrees::last_points() const {
  std::vector<HeldPoint> out;
  for (const auto& [key, q] : queues_)
    if (!q.blocks.empty()) out.push_back({q.blocks.back()->side->waits.back(), q.keep});
  return out;
}

}  // namespace hostrt::detail::pool
