// PoolBuffer: one block of a hostrt::Pool that frees itself (hostrt/pool.hpp).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "hostrt/pool_fwd.hpp"

namespace hostrt {

// One block of a Pool, freed on its stream when the handle goes. Movable. It holds the
// stream's internals, not the Stream handle, and the pool's internals, not the Pool: either
// may be moved or destroyed first (the block stays valid until the handle frees it, as
// cudaMemPoolDestroy leaves blocks valid until they are freed).
class PoolBuffer {
 public:
  PoolBuffer() noexcept = default;
  PoolBuffer(Pool& pool, void* p, std::size_t bytes, Stream& stream) noexcept;
  PoolBuffer(PoolBuffer&& o) noexcept;
  PoolBuffer& operator=(PoolBuffer&& o) noexcept;
  PoolBuffer(const PoolBuffer&) = delete;
  PoolBuffer& operator=(const PoolBuffer&) = delete;
  ~PoolBuffer() { reset(); }

  void* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(ptr_), size_}; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  void record_stream(Stream& other);
  // Frees now (stream-ordered, as Pool::deallocate). Never throws: a failure (only possible
  // with sync_on_free, a device fault) is dropped; call Pool::deallocate to see it.
  void reset() noexcept;
  // Gives up ownership without freeing.
  void* release() noexcept;

 private:
  // A device owns its default pool: held first, so that it goes after the pool's core.
  std::shared_ptr<const void> keep_device_;
  std::shared_ptr<detail::pool::PoolCore> core_;
  std::shared_ptr<const detail::AccessList> access_;  // for record_stream's check
  const detail::DeviceCore* device_ = nullptr;        // the pool's own device
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  std::shared_ptr<detail::StreamCore> stream_;
};

}  // namespace hostrt
