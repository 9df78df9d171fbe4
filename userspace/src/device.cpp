#include "hostrt/device.hpp"

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "detail/trace.hpp"
#include "hostrt/error.hpp"
#include "hostrt/pool.hpp"

namespace hostrt {

std::size_t Device::count(Backend b) {
  return b == Backend::Drm ? detail::drm_device_count() : detail::emulated_device_count();
}

Device Device::open(std::size_t index, Backend b) {
  auto backend = b == Backend::Drm ? detail::open_drm(index) : detail::open_emulated(index);
  return Device(std::make_shared<detail::DeviceCore>(std::move(backend), index, b));
}

Device::Device(std::shared_ptr<detail::DeviceCore> core) noexcept : core_(std::move(core)) {}
Device::Device(Device&&) noexcept = default;
Device& Device::operator=(Device&&) noexcept = default;
Device::~Device() = default;

namespace {
detail::DeviceCore& live(const std::shared_ptr<detail::DeviceCore>& c, const char* what) {
  if (!c) throw InvalidArgument(EINVAL, std::string(what) + ": empty (moved-from) Device");
  c->backend(what);  // DeviceLost once closed
  return *c;
}
}  // namespace

std::size_t Device::index() const noexcept { return core_ ? core_->index() : 0; }
Backend Device::backend() const noexcept { return core_ ? core_->kind() : Backend::Drm; }
std::string Device::name() const { return live(core_, "name").backend("name").name(); }

std::string Device::node() const { return live(core_, "node").backend("node").node(); }

const Capabilities& Device::capabilities() const noexcept {
  static const Capabilities none{};
  return core_ ? core_->caps() : none;
}

std::uint64_t Device::param(std::uint32_t p) const {
  return live(core_, "param").backend("param").get_param(p);
}

std::uint64_t Device::pinned_bytes() const { return param(DRM_EDU_ACCEL_PARAM_PINNED_BYTES); }

PinnedBuffer Device::host_alloc(std::size_t bytes, unsigned flags) {
  live(core_, "host_alloc");
  return detail::Access::pinned(detail::Allocation::create(core_, bytes, flags));
}

PinnedBuffer Device::host_register(void* ptr, std::size_t bytes, unsigned flags) {
  live(core_, "host_register");
  return detail::Access::pinned(detail::Allocation::register_range(core_, ptr, bytes, flags));
}

PinnedBuffer Device::import_dmabuf(int fd) {
  return detail::Access::pinned(detail::Allocation::import_dmabuf(core_, fd));
}

void Device::free_host_sync(PinnedBuffer&& buffer) {
  PinnedBuffer b = std::move(buffer);  // freed on every path out of here
  if (!b) return;
  const auto& a = hostrt::detail::Access::allocation(b);
  if (a->device() != core_) throw WrongDevice(EXDEV, "free_host_sync: the buffer belongs to another device");
  // A closed device (hrtDeviceReset) can no longer be synchronized with; its jobs hold their
  // own references on the buffer, so freeing without the wait is still safe.
  if (!core_->closed()) synchronize();
  // Portable memory: the other devices that copied it may still be using it too.
  for (auto& peer : a->peer_devices())
    if (!peer->closed()) Device(peer).synchronize();
}

void free_host_sync(PinnedBuffer&& buffer) {
  PinnedBuffer b = std::move(buffer);
  if (!b) return;
  detail::Access::device(hostrt::detail::Access::allocation(b)->device()).free_host_sync(std::move(b));
}

Stream Device::create_stream(StreamPriority priority) {
  live(core_, "create_stream");
  return detail::Access::stream(detail::StreamCore::create(core_, priority));
}

void Device::synchronize() {
  live(core_, "synchronize");
  const detail::trace::ApiSpan span(detail::trace::Api::DeviceSynchronize);
  // Points are sampled first, so work submitted meanwhile by other threads is not waited for.
  std::vector<std::pair<std::shared_ptr<detail::StreamCore>, std::uint64_t>> points;
  for (auto& s : core_->streams()) {
    s->drain_host_funcs();
    points.emplace_back(s, s->last_submitted());
  }
  // Destroyed streams' work runs on and may still write into memory the caller is about to
  // reuse (cudaDeviceSynchronize waits for it too).
  const auto retired = core_->retired();
  for (auto& [s, p] : points) s->wait(p);
  for (const auto& r : retired) r->wait();
}

Pool& Device::default_pool() { return live(core_, "default_pool").default_pool(); }
Pool& Device::mem_pool() { return live(core_, "mem_pool").mem_pool(); }
void Device::set_mem_pool(Pool& pool) { live(core_, "set_mem_pool").set_mem_pool(&pool); }
void Device::reset_mem_pool() { live(core_, "reset_mem_pool").set_mem_pool(nullptr); }

void* Device::malloc_async(std::size_t bytes, Stream& stream) {
  return live(core_, "malloc_async").mem_pool().allocate(bytes, stream);
}

void Device::free_async(void* p, Stream& stream) {
  Pool* pool = detail::find_pool(p);
  EXPECTS(pool != nullptr, "free_async: the pointer is not in a pool's memory");
  pool->deallocate(p, stream);
}

void Device::close() noexcept {
  if (core_) core_->close();
}

bool Device::is_open() const noexcept { return core_ && !core_->closed(); }

}  // namespace hostrt
