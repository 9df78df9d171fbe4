// hostrt::Pool and friends: the public face of detail::pool::PoolCore, bound to a Device
// (segments from host_alloc) and to hostrt::Stream (completion through the stream's page).
#include "hostrt/pool.hpp"

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/peer_views.hpp"
#include "detail/pool/pool_core.hpp"
#include "detail/pool/registration_index.hpp"
#include "detail/pool/stream_core_ref.hpp"
#include "hostrt/device.hpp"
#include "hostrt/stream.hpp"

namespace hostrt {

namespace {

using detail::pool::PoolCore;
using detail::pool::StreamRef;

[[noreturn, gnu::noinline, gnu::cold]] void throw_empty_stream() {
  throw InvalidArgument(EINVAL, "pool: empty (destroyed or moved-from) stream");
}

// A stream of another device than the pool's: fine when that device was given access,
// WrongDevice otherwise. Out of line: the warm path only compares the device.
[[noreturn, gnu::noinline, gnu::cold]] void throw_other_device(const char* what, const detail::StreamCore& s,
                                                               const detail::DeviceCore& own) {
  throw WrongDevice(EXDEV, std::string("pool: ") + what + ": a stream of another device (device " +
                               std::to_string(s.device()->index()) + ") than the pool's (device " +
                               std::to_string(own.index()) + "), not given access (Pool::set_access)");
}

[[gnu::noinline, gnu::cold]] void check_other_device(const char* what, const detail::StreamCore& s,
                                                     const Pool& pool) {
  if (!detail::Access::serves(pool, s.device()))
    throw_other_device(what, s, *hostrt::detail::Access::device_core(pool));
}

// The pool's view of a stream, refused when the stream is empty or of a device without
// access. On the warm path of every allocate/free through Pool: inline, two loads and a
// compare, the rest out of line (an outlined call here cost ~3 ns of a 12 ns pair).
[[gnu::always_inline]] inline StreamRef ref(Stream& s, const Pool& pool, const char* what) {
  detail::StreamCore* c = hostrt::detail::Access::core(s).get();
  if (c == nullptr) [[unlikely]]
    throw_empty_stream();
  const detail::DeviceCore* pool_device = hostrt::detail::Access::device_core(pool);
  if (pool_device != nullptr && c->device().get() != pool_device) [[unlikely]]
    check_other_device(what, *c, pool);
  return detail::pool::stream_ref(*c);
}

// Every live Pool, for pointer attributes (find_pool asks the page map). Never destroyed:
// pools may go in static destructors.
struct Directory {
  std::mutex m;
  std::vector<Pool*> pools;
};
Directory& directory() {
  static Directory* d = new Directory;
  return *d;
}

class DeviceSegment final : public detail::pool::SegmentMemory {
 public:
  explicit DeviceSegment(PinnedBuffer b) noexcept : buffer_(std::move(b)) {}
  void* data() const noexcept override { return buffer_.data(); }
  std::size_t size() const noexcept override { return buffer_.size(); }

 private:
  PinnedBuffer buffer_;
};

// Holds its own Device handle on the same internals, so the pool does not depend on the
// caller's Device object staying alive (or in place).
// Segments are portable memory restricted to the pool's access list: granting access later
// applies to them too, and memory no other device may use costs nothing more (the views are
// made at another device's first copy).
class DeviceSegmentSource final : public detail::pool::SegmentSource {
 public:
  DeviceSegmentSource(Device& d, std::shared_ptr<const detail::AccessList> access)
      : device_(detail::Access::device(hostrt::detail::Access::core(d))), access_(std::move(access)) {}
  // Not owning: for the device's default pool, which the device's internals own.
  DeviceSegmentSource(detail::DeviceCore& core, std::shared_ptr<const detail::AccessList> access)
      : device_(detail::Access::device(
            std::shared_ptr<detail::DeviceCore>(std::shared_ptr<detail::DeviceCore>(), &core))),
        access_(std::move(access)) {}
  std::unique_ptr<detail::pool::SegmentMemory> allocate(std::size_t bytes) override {
    if (!device_.is_open()) throw DeviceLost(ENODEV, "pool: the device is closed");
    return std::make_unique<DeviceSegment>(detail::Access::pinned(detail::Allocation::create(
        hostrt::detail::Access::core(device_), bytes, kHostAllocPortable, access_)));
  }

 private:
  Device device_;
  std::shared_ptr<const detail::AccessList> access_;
};

class DeviceRegistration final : public detail::pool::Registration {
 public:
  explicit DeviceRegistration(PinnedBuffer b) noexcept : buffer_(std::move(b)) {}
  std::uint32_t handle() const noexcept override { return buffer_.handle(); }

 private:
  PinnedBuffer buffer_;
};

class DeviceRegistrar final : public detail::pool::Registrar {
 public:
  DeviceRegistrar(Device& d, unsigned flags)
      : device_(detail::Access::device(hostrt::detail::Access::core(d))), flags_(flags) {}
  std::unique_ptr<detail::pool::Registration> register_range(void* ptr, std::size_t bytes) override {
    return std::make_unique<DeviceRegistration>(device_.host_register(ptr, bytes, flags_));
  }
  const std::uint64_t* invalidations() override {
    return hostrt::detail::Access::core(device_)->backend("registration cache").invalidation_counter();
  }
  bool stale(const detail::pool::Registration& reg) override {
    return hostrt::detail::Access::core(device_)
        ->backend("registration cache")
        .registration_stale(reg.handle());
  }

 private:
  Device device_;
  unsigned flags_;
};

}  // namespace

std::string PoolStats::to_string() const {
  std::ostringstream o;
  o << "reserved " << reserved_bytes << " (peak " << peak_reserved_bytes << "), allocated " << allocated_bytes
    << " (peak " << peak_allocated_bytes << "), requested " << requested_bytes << " (peak "
    << peak_requested_bytes << "), pending " << pending_free_bytes << ", cached " << cached_bytes << ", free "
    << free_bytes << ", segments " << segments << " (" << small_segments << " small, " << large_segments
    << " large), hits " << hits << ", misses " << misses << ", frees waited " << frees_waited << ", waits "
    << waits;
  return o.str();
}

// ---- Pool ----------------------------------------------------------------------------------

Pool::Pool(Device& device, PoolOptions options)
    : access_(std::make_shared<detail::AccessList>()),
      core_(PoolCore::create(std::make_unique<DeviceSegmentSource>(device, access_), options)) {
  if (!device.is_open()) throw DeviceLost(ENODEV, "pool: the device is closed");
  attach(hostrt::detail::Access::core(device).get());
}

Pool::Pool(std::unique_ptr<detail::pool::SegmentSource> source, PoolOptions options)
    : core_(PoolCore::create(std::move(source), options)) {
  attach(nullptr);
}

Pool::Pool(DefaultPoolTag, detail::DeviceCore& device)
    : access_(std::make_shared<detail::AccessList>()),
      core_(PoolCore::create(std::make_unique<DeviceSegmentSource>(device, access_), PoolOptions{})) {
  attach(&device);
}

void Pool::attach(detail::DeviceCore* device) {
  device_ = device;
  core_->set_owner(this);
  if (device != nullptr) device->watch_close(core_);
  auto& d = directory();
  std::lock_guard lk(d.m);
  d.pools.push_back(this);
}

Pool::~Pool() {
  core_->set_owner(nullptr);
  {
    auto& d = directory();
    std::lock_guard lk(d.m);
    std::erase(d.pools, this);
  }
  // The device's internals are alive: the segment source holds them (the default pool's
  // owner is destroying it).
  if (device_ != nullptr) device_->forget_mem_pool(this);
  // PoolBuffers and PoolMemoryResources may hold the core on: their blocks stay valid and
  // can be freed, nothing more is allocated.
  core_->owner_destroyed();
}

namespace {
// The warm wrappers below only compare and tail-call: anything unusual (an empty stream,
// another device's, host functions to drain) goes to one of these, which does the whole
// call with every check. A wrapper that called a check and went on had to keep its
// arguments across the call (three registers saved and restored per call, each way).
[[gnu::noinline]] void* allocate_checked(const Pool& pool, std::size_t bytes, Stream& stream) {
  return detail::Access::core(pool).allocate(bytes, ref(stream, pool, "allocate"));
}
[[gnu::noinline]] void deallocate_checked(const Pool& pool, void* p, Stream& stream) {
  const StreamRef s = ref(stream, pool, "deallocate");
  detail::StreamCore& c = *hostrt::detail::Access::core(stream);
  if (c.host_funcs_need_drain()) c.drain_host_funcs();
  detail::Access::core(pool).deallocate(p, s);
}
// The stream's core when a warm call may use it as is: the stream is not empty, and of the
// pool's device (or the pool has none).
[[gnu::always_inline]] inline detail::StreamCore* warm_core(Stream& s, const Pool& pool) noexcept {
  detail::StreamCore* c = hostrt::detail::Access::core(s).get();
  const detail::DeviceCore* d = hostrt::detail::Access::device_core(pool);
  if (c == nullptr || (d != nullptr && c->device().get() != d)) [[unlikely]]
    return nullptr;
  return c;
}
}  // namespace

void* Pool::allocate(std::size_t bytes, Stream& stream) {
  detail::StreamCore* c = warm_core(stream, *this);
  if (c == nullptr) [[unlikely]]
    return allocate_checked(*this, bytes, stream);
  return core_->allocate(bytes, detail::pool::stream_ref(*c));
}
void* Pool::allocate(std::size_t bytes) { return core_->allocate(bytes, {}); }

// A stream-ordered free or use follows the stream's host functions: they may use the block.
void Pool::deallocate(void* p, Stream& stream) {
  detail::StreamCore* c = warm_core(stream, *this);
  if (c == nullptr || c->host_funcs_need_drain()) [[unlikely]]
    return deallocate_checked(*this, p, stream);
  core_->deallocate(p, detail::pool::stream_ref(*c));
}
void Pool::deallocate(void* p) { core_->deallocate(p, {}); }
void Pool::record_stream(void* p, Stream& stream) {
  const StreamRef s = ref(stream, *this, "record_stream");
  hostrt::detail::Access::core(stream)->drain_host_funcs();
  core_->record_stream(p, s);
}

void Pool::set_access(const Device& device, bool enabled) {
  if (device_ == nullptr || !access_)
    throw InvalidArgument(EINVAL, "pool: set_access on a pool without a device");
  const auto& core = hostrt::detail::Access::core(device);
  if (!core) throw InvalidArgument(EINVAL, "pool: set_access for an empty Device");
  if (core->kind() != device_->kind())
    throw WrongDevice(EXDEV, std::string("pool: set_access for a ") + to_string(core->kind()) +
                                 " device on a pool of a " + to_string(device_->kind()) + " device");
  if (core.get() == device_) {
    if (!enabled) throw InvalidArgument(EINVAL, "pool: its own device's access cannot be revoked");
    return;
  }
  access_->set(core, enabled);
}

bool Pool::has_access(const Device& device) const {
  return hostrt::detail::Access::core(device) && serves(hostrt::detail::Access::core(device));
}

bool Pool::serves(const std::shared_ptr<detail::DeviceCore>& device) const {
  return serves(device_, access_.get(), device);
}

bool Pool::serves(const detail::DeviceCore* own, const detail::AccessList* access,
                  const std::shared_ptr<detail::DeviceCore>& device) {
  return device.get() == own || (access != nullptr && access->allows(device));
}
std::size_t Pool::block_size(const void* p) const { return core_->block_size(p); }

PoolBuffer Pool::allocate_buffer(std::size_t bytes, Stream& stream) {
  return PoolBuffer(*this, allocate(bytes, stream), bytes, stream);
}

void Pool::reserve(std::size_t large_bytes, std::size_t small_bytes) {
  core_->reserve(large_bytes, small_bytes);
}
std::size_t Pool::trim(std::size_t keep_bytes) { return core_->trim(keep_bytes); }
void Pool::set_retain_bytes(std::size_t bytes) { core_->set_retain_bytes(bytes); }
std::size_t Pool::retain_bytes() const noexcept { return core_->retain_bytes(); }
void Pool::synchronize() { core_->synchronize(); }
void Pool::flush_thread_cache() { core_->flush_thread_cache(); }
PoolStats Pool::stats() const { return core_->stats(); }
void Pool::reset_peak_stats() { core_->reset_peak_stats(); }

// ---- PoolBuffer ----------------------------------------------------------------------------

PoolBuffer::PoolBuffer(Pool& pool, void* p, std::size_t bytes, Stream& stream) noexcept
    : keep_device_(pool.device_ != nullptr ? pool.device_->shared_from_this() : nullptr),
      core_(pool.core_),
      access_(pool.access_),
      device_(pool.device_),
      ptr_(p),
      size_(bytes),
      stream_(hostrt::detail::Access::core(stream)) {}

PoolBuffer::PoolBuffer(PoolBuffer&& o) noexcept
    : keep_device_(std::move(o.keep_device_)),
      core_(std::move(o.core_)),
      access_(std::move(o.access_)),
      device_(std::exchange(o.device_, nullptr)),
      ptr_(std::exchange(o.ptr_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      stream_(std::move(o.stream_)) {}

PoolBuffer& PoolBuffer::operator=(PoolBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    keep_device_ = std::move(o.keep_device_);
    core_ = std::move(o.core_);
    access_ = std::move(o.access_);
    device_ = std::exchange(o.device_, nullptr);
    ptr_ = std::exchange(o.ptr_, nullptr);
    size_ = std::exchange(o.size_, 0);
    stream_ = std::move(o.stream_);
  }
  return *this;
}

void PoolBuffer::record_stream(Stream& other) {
  if (ptr_ == nullptr) throw InvalidArgument(EINVAL, "pool: record_stream on an empty PoolBuffer");
  detail::StreamCore* s = hostrt::detail::Access::core(other).get();
  if (s == nullptr) throw_empty_stream();
  if (device_ != nullptr && !Pool::serves(device_, access_.get(), s->device()))
    throw_other_device("record_stream", *s, *device_);
  core_->record_stream(ptr_, detail::pool::stream_ref(*s));
}

void PoolBuffer::reset() noexcept {
  if (ptr_ == nullptr) return;
  try {
    core_->deallocate(ptr_, stream_ ? detail::pool::stream_ref(*stream_) : StreamRef{});
  } catch (...) {  // destructors never throw; see the header
  }
  ptr_ = nullptr;
  core_.reset();  // before the device it may need
  access_.reset();
  device_ = nullptr;
  keep_device_.reset();
  stream_.reset();
  size_ = 0;
}

void* PoolBuffer::release() noexcept {
  core_.reset();
  access_.reset();
  device_ = nullptr;
  keep_device_.reset();
  stream_.reset();
  size_ = 0;
  return std::exchange(ptr_, nullptr);
}

// ---- PoolMemoryResource --------------------------------------------------------------------

PoolMemoryResource::PoolMemoryResource(Pool& pool, Stream* stream) noexcept
    : keep_device_(pool.device_ != nullptr ? pool.device_->shared_from_this() : nullptr),
      core_(pool.core_),
      access_(pool.access_),
      device_(pool.device_),
      stream_(stream != nullptr ? hostrt::detail::Access::core(*stream) : nullptr) {}

void* PoolMemoryResource::do_allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment > detail::pool::kAlignment)
    throw InvalidArgument(EINVAL, "pool: alignment " + std::to_string(alignment) + " above 64");
  if (stream_ && device_ != nullptr && stream_->device().get() != device_ &&
      !Pool::serves(device_, access_.get(), stream_->device())) [[unlikely]]
    throw_other_device("PoolMemoryResource", *stream_, *device_);
  return core_->allocate(bytes, stream_ ? detail::pool::stream_ref(*stream_) : StreamRef{});
}

void PoolMemoryResource::do_deallocate(void* p, std::size_t, std::size_t) {
  core_->deallocate(p, stream_ ? detail::pool::stream_ref(*stream_) : StreamRef{});
}

bool PoolMemoryResource::do_is_equal(const std::pmr::memory_resource& other) const noexcept {
  const auto* o = dynamic_cast<const PoolMemoryResource*>(&other);
  return o != nullptr && o->core_ == core_ && o->stream_ == stream_;
}

// ---- the pools of the process -------------------------------------------------------------

Pool* detail::find_pool(const void* p) {
  detail::pool::PoolCore* c = detail::pool::PoolCore::at(p);
  return c != nullptr ? c->owner() : nullptr;
}

bool detail::describe_pool_block(const void* p, PoolBlockInfo& info) {
  auto& d = directory();
  std::lock_guard lk(d.m);  // the pool cannot go meanwhile
  // No segment is read without its pool's lock: p may be stale, and its segment released by a
  // trim on another thread right now (the page map's answer would then be freed memory).
  for (Pool* pool : d.pools) {
    const detail::pool::PoolCore& core = hostrt::detail::Access::core(*pool);
    std::uintptr_t base = 0;
    std::size_t requested = 0;
    if (!core.may_own(p) || !core.describe(p, base, requested)) continue;  // spans may overlap
    info.base = reinterpret_cast<void*>(base);
    info.size = requested;
    return true;
  }
  return false;
}

// ---- RegistrationCache ---------------------------------------------------------------------

RegistrationCache::RegistrationCache(Device& device, unsigned flags)
    : index_(std::make_shared<detail::pool::RegistrationIndex>(
          std::make_unique<DeviceRegistrar>(device, flags))) {}

RegistrationCache::~RegistrationCache() = default;

RegisteredRange RegistrationCache::acquire(void* ptr, std::size_t bytes) {
  const auto lease = index_->acquire(ptr, bytes);
  return RegisteredRange(index_, lease.key, ptr, bytes, lease.handle);
}

std::size_t RegistrationCache::evict_idle() { return index_->evict_idle(); }
std::size_t RegistrationCache::registrations() const { return index_->registrations(); }
std::uint64_t RegistrationCache::hits() const { return index_->hits(); }
std::uint64_t RegistrationCache::misses() const { return index_->misses(); }

RegisteredRange::RegisteredRange(RegisteredRange&& o) noexcept
    : index_(std::move(o.index_)),
      key_(std::exchange(o.key_, 0)),
      ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      handle_(std::exchange(o.handle_, 0)) {}

RegisteredRange& RegisteredRange::operator=(RegisteredRange&& o) noexcept {
  if (this != &o) {
    reset();
    index_ = std::move(o.index_);
    key_ = std::exchange(o.key_, 0);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    handle_ = std::exchange(o.handle_, 0);
  }
  return *this;
}

void RegisteredRange::reset() noexcept {
  if (index_ != nullptr) index_->release(key_);
  index_.reset();
  ptr_ = nullptr;
  bytes_ = 0;
  handle_ = 0;
}

}  // namespace hostrt
