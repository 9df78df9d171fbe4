// Staging: the pinned memory a stream copies pageable memory through. It is a caching pool
// (detail::pool::PoolCore) of the stream's own, so staged chunks follow the pool's reuse rule:
// a chunk freed behind a job is handed out again only once the host has seen the stream reach
// that job (however the job is ordered: behind an event, on a stream the user destroyed
// meanwhile). The pool is capped at kRingBytes, one segment carved into kChunkBytes chunks: a
// copy larger than the ring waits for its oldest chunk instead of pinning its whole size.
// When every chunk is held by a copy in progress (several threads copying pageable memory on
// one stream, e.g. the NULL stream), a chunk is pinned for the one copy instead: a copy never
// fails for want of staging, and never waits for another thread's copy.
//
// The stream owns its staging, so staged frees hold no reference to the stream (that would be
// a cycle). When the stream goes, its staging goes without waiting: the BOs are released
// while jobs may still use them, which both backends allow (a job holds a reference on the
// BOs it names), and nothing can hand that memory out again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "detail/backend.hpp"

namespace hostrt::detail {

namespace pool {
class PoolCore;
}
class StreamCore;
struct StagingSegments;

class Staging {
 public:
  static constexpr std::size_t kChunkBytes = std::size_t{64} << 10;
  static constexpr std::size_t kRingBytes = 4 * kChunkBytes;

  // Owned by `stream`, whose device provides the BOs; both outlive the Staging.
  explicit Staging(StreamCore& stream);
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging();

  struct Chunk {
    void* ptr = nullptr;
    std::uint32_t handle = 0;  // the BO holding it
    std::uint64_t offset = 0;  // in that BO
    BoMapping own;             // a chunk pinned for this copy alone (the ring was all held)
  };
  // bytes <= kChunkBytes. May block for the stream's oldest staged job (the ring is full).
  Chunk acquire(std::size_t bytes);
  // Back to the ring once everything submitted on the stream so far has completed.
  void release(const Chunk& c);

 private:
  StreamCore& stream_;
  std::shared_ptr<StagingSegments> segments_;  // the BOs behind the pool, to find a chunk's handle
  std::shared_ptr<pool::PoolCore> pool_;
};

}  // namespace hostrt::detail
