// PoolMemoryResource: a std::pmr::memory_resource over a hostrt::Pool (hostrt/pool.hpp).
#pragma once

#include <cstddef>
#include <memory>
#include <memory_resource>

#include "hostrt/pool_fwd.hpp"

namespace hostrt {

// std::pmr adaptor, so containers can live in pinned memory:
//   hostrt::PoolMemoryResource mr(pool, stream);
//   std::pmr::vector<float> v(&mr);
// Frees are stream-ordered on `stream` (or have no stream when constructed without one). The
// resource holds the stream's and the pool's internals, so the Stream handle and the Pool may
// be moved or destroyed first: frees then still work, and allocations throw InvalidArgument
// (a destroyed pool hands out nothing more).
// Alignments up to 64 are honoured; larger ones throw InvalidArgument.
class PoolMemoryResource : public std::pmr::memory_resource {
 public:
  explicit PoolMemoryResource(Pool& pool, Stream* stream = nullptr) noexcept;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override;

  std::shared_ptr<const void> keep_device_;  // as PoolBuffer's: destroyed after the core
  std::shared_ptr<detail::pool::PoolCore> core_;
  std::shared_ptr<const detail::AccessList> access_;
  const detail::DeviceCore* device_ = nullptr;
  std::shared_ptr<detail::StreamCore> stream_;  // empty: no stream
};

}  // namespace hostrt
