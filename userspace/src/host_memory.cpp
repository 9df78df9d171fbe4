#include "hostrt/host_memory.hpp"

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "detail/peer_views.hpp"
#include "detail/registry.hpp"
#include "hostrt/pool.hpp"

namespace hostrt {

PinnedBuffer::PinnedBuffer(std::shared_ptr<detail::Allocation> a) noexcept : alloc_(std::move(a)) {}
PinnedBuffer::PinnedBuffer(PinnedBuffer&&) noexcept = default;
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) alloc_ = std::move(o.alloc_);
  return *this;
}
PinnedBuffer::~PinnedBuffer() = default;

void* PinnedBuffer::data() const noexcept { return alloc_ ? alloc_->data() : nullptr; }
std::size_t PinnedBuffer::size() const noexcept { return alloc_ ? alloc_->size() : 0; }
std::uint32_t PinnedBuffer::handle() const noexcept { return alloc_ ? alloc_->handle() : 0; }
MemoryType PinnedBuffer::type() const noexcept { return alloc_ ? alloc_->type() : MemoryType::Pageable; }
std::size_t PinnedBuffer::device_index() const noexcept { return alloc_ ? alloc_->device()->index() : 0; }
void PinnedBuffer::reset() noexcept { alloc_.reset(); }

UniqueFd export_dmabuf(const PinnedBuffer& buffer) {
  EXPECTS(static_cast<bool>(buffer), "export_dmabuf of an empty buffer");
  const auto& a = hostrt::detail::Access::allocation(buffer);
  return UniqueFd(a->device()->backend("export_dmabuf").export_dmabuf(a->handle()));
}

PointerAttributes pointer_attributes(const void* p) {
  PointerAttributes a;
  if (auto d = DevicePtr::from(p)) {
    a.type = MemoryType::Device;
    a.base = DevicePtr(0).as_void();
    a.size = DevicePtr::kAddressSpan;
    a.offset = d->offset;
    return a;
  }
  if (auto e = detail::registry().find(p)) {
    a.type = e->type;
    a.device = e->device_index;
    a.backend = e->backend;
    a.handle = e->handle;
    a.base = reinterpret_cast<void*>(e->begin);
    a.size = e->end - e->begin;
    a.offset = reinterpret_cast<std::uintptr_t>(p) - e->begin;
    a.portable = e->peers != nullptr && e->peers->shared();
    // A block of a pool is what its user allocated, not the pool's segment around it.
    detail::PoolBlockInfo block;
    if (e->type == MemoryType::Pinned && detail::describe_pool_block(p, block)) {
      a.base = block.base;
      a.size = block.size;
      a.offset = static_cast<std::size_t>(static_cast<const char*>(p) - static_cast<const char*>(block.base));
    }
  }
  return a;
}

}  // namespace hostrt
