// PinnedBuffer: host memory the device can reach, owned RAII-style.
//
// Two kinds, both from a Device: host_alloc (a driver BO mapped into the process: zeroed,
// page-aligned, size rounded up to 64 bytes) and host_register (an existing range pinned in
// place, exactly as given). Either is known to the pointer registry
// (hostrt::pointer_attributes) for as long as the buffer lives.
//
// Freeing (destructor, reset(), Device::free_host_sync):
//  - reset() / the destructor return at once and never throw. Device work already submitted
//    that reads or writes the buffer still completes safely: on Drm each job holds a
//    reference on its BOs, so the pages stay allocated (host_alloc) or pinned (host_register)
//    until it ends. The host must not reuse a registered range that a pending D2H/H2H still
//    writes; host_alloc memory simply disappears from the process.
//    (Emulated backend: releasing a registered range waits for the jobs naming it, because
//    an in-process engine cannot keep the user's pages alive.)
//  - Device::free_host_sync(buffer) first waits until every stream of the device has
//    finished the work submitted before the call (cudaFreeHost's behaviour), reporting a
//    device failure of that work, then frees. On a closed device it frees without waiting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "hostrt/types.hpp"
#include "hostrt/unique_fd.hpp"

namespace hostrt {

namespace detail {
class Allocation;
struct Access;
}  // namespace detail

class PinnedBuffer {
 public:
  PinnedBuffer() noexcept = default;
  PinnedBuffer(PinnedBuffer&&) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&&) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const noexcept;
  // host_alloc: requested bytes rounded up to 64; host_register: the registered bytes.
  std::size_t size() const noexcept;
  // GEM handle of the BO on its device's file (0 for an empty buffer).
  std::uint32_t handle() const noexcept;
  // Pinned (host_alloc) or Registered (host_register); Pageable when empty.
  MemoryType type() const noexcept;
  std::size_t device_index() const noexcept;
  std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(data()), size()}; }
  explicit operator bool() const noexcept { return alloc_ != nullptr; }

  // Frees now (see the header comment for what "now" means for pending work). Never throws.
  void reset() noexcept;

 private:
  friend struct detail::Access;
  explicit PinnedBuffer(std::shared_ptr<detail::Allocation> a) noexcept;
  std::shared_ptr<detail::Allocation> alloc_;
};

// Device::free_host_sync for the buffer's own device: waits for the work submitted so far on
// every stream of that device, then frees (also when the wait throws).
void free_host_sync(PinnedBuffer&& buffer);

// The buffer's BO as a new dma-buf, for another device or driver to import (cudaIpc-style
// sharing through the kernel). The pages stay pinned while the fd or any importer holds
// them, after the buffer is freed. InvalidArgument for an empty buffer; PermissionDenied for
// a read-only registration (an importer could write it); NotSupported on the emulated
// backend. An imported buffer exports its original dma-buf again.
UniqueFd export_dmabuf(const PinnedBuffer& buffer);

// What hostrt knows about p: pinned, registered, device or pageable, and which buffer.
PointerAttributes pointer_attributes(const void* p);

}  // namespace hostrt
