#include "hostrt/stream.hpp"

#include <cstring>

#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "detail/registry.hpp"
#include "hostrt/event.hpp"

namespace hostrt {

namespace {

detail::StreamCore& live(const std::shared_ptr<detail::StreamCore>& c, const char* what) {
  if (!c) throw InvalidArgument(EINVAL, std::string(what) + ": the stream is destroyed (or moved from)");
  return *c;
}

// One side of a copy, resolved to what the UAPI wants.
struct End {
  bool pageable = false;
  std::uint32_t handle = 0;  // 0: the device buffer
  std::uint64_t offset = 0;
};

End resolve_device(const void* p, std::size_t n, const Capabilities& caps, const char* role) {
  const auto d = DevicePtr::from(p);
  EXPECTS(d, std::string("memcpy_async: ") + role + " must be a device address (DevicePtr::as_void())");
  EXPECTS(d->offset <= caps.max_transfer && n <= caps.max_transfer - d->offset,
          std::string("memcpy_async: device ") + role + " range [" + std::to_string(d->offset) + ", " +
              std::to_string(d->offset + n) + ") ends past the device's max transfer " +
              std::to_string(caps.max_transfer));
  return {false, 0, d->offset};
}

End resolve_host(const detail::DeviceCore& dev, const void* p, std::size_t n, bool written,
                 const char* role) {
  EXPECTS(!DevicePtr::from(p),
          std::string("memcpy_async: ") + role + " is a device address but the copy kind wants host memory");
  const auto e = detail::registry().find(p);
  if (!e) return {true, 0, 0};
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  EXPECTS(e->device == &dev, std::string("memcpy_async: ") + role + " is " + to_string(e->type) +
                                 " memory of another device, or of another Device::open of it (" +
                                 to_string(e->backend) + " #" + std::to_string(e->device_index) + ")");
  EXPECTS(n <= e->end - a, std::string("memcpy_async: ") + role + " range of " + std::to_string(n) +
                               " bytes runs past the end of its " + to_string(e->type) + " buffer (" +
                               std::to_string(e->end - a) + " bytes left)");
  EXPECTS(!(written && e->readonly), "memcpy_async: destination is registered read-only");
  return {false, e->handle, a - e->begin};
}

}  // namespace

Stream::Stream(std::shared_ptr<detail::StreamCore> core) noexcept : core_(std::move(core)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) core_ = std::move(o.core_);
  return *this;
}
Stream::~Stream() = default;

std::uint64_t Stream::id() const noexcept { return core_ ? core_->id() : 0; }
std::size_t Stream::device_index() const noexcept { return core_ ? core_->device()->index() : 0; }
std::uint64_t Stream::last_submitted() const noexcept { return core_ ? core_->last_submitted() : 0; }
bool Stream::reached(std::uint64_t point) const noexcept { return core_ && core_->reached(point); }

void Stream::wait_point(std::uint64_t point) { live(core_, "wait_point").wait(point); }

void Stream::synchronize() {
  auto& s = live(core_, "synchronize");
  s.wait(s.last_submitted());
}

bool Stream::query() {
  auto& s = live(core_, "query");
  const std::uint64_t p = s.last_submitted();
  if (!s.reached(p)) return false;
  s.check_failure(p);
  return true;
}

void Stream::memcpy_async(void* dst, const void* src, std::size_t n, CopyKind kind) {
  auto& s = live(core_, "memcpy_async");
  const auto& dev = s.device();
  detail::DeviceBackend& be = dev->backend("memcpy_async");
  EXPECTS(kind == CopyKind::H2D || kind == CopyKind::D2H || kind == CopyKind::H2H,
          "memcpy_async: unknown copy kind " + std::to_string(static_cast<int>(kind)));
  if (n == 0) return;
  EXPECTS(dst != nullptr && src != nullptr, "memcpy_async: null pointer");
  const Capabilities& caps = dev->caps();
  const End from = kind == CopyKind::D2H ? resolve_device(src, n, caps, "source")
                                         : resolve_host(*dev, src, n, false, "source");
  const End to = kind == CopyKind::H2D ? resolve_device(dst, n, caps, "destination")
                                       : resolve_host(*dev, dst, n, true, "destination");

  detail::CopyOp op{};
  op.type = static_cast<std::uint32_t>(kind);
  op.size = n;
  op.src_handle = from.handle;
  op.src_offset = from.offset;
  op.dst_handle = to.handle;
  op.dst_offset = to.offset;

  // Pageable memory goes through pinned bounce buffers (see stream.hpp for who waits).
  auto& pool = dev->bounce();
  detail::BoMapping src_bounce{}, dst_bounce{};
  auto give_back = [&] {
    if (src_bounce.handle) pool.release(be, src_bounce);
    if (dst_bounce.handle) pool.release(be, dst_bounce);
  };
  std::uint64_t seqno = 0;
  try {
    if (from.pageable) {
      src_bounce = pool.acquire(be, n);
      std::memcpy(src_bounce.ptr, src, n);
      op.src_handle = src_bounce.handle;
      op.src_offset = 0;
    }
    if (to.pageable) {
      dst_bounce = pool.acquire(be, n);
      op.dst_handle = dst_bounce.handle;
      op.dst_offset = 0;
    }
    seqno = s.submit({&op, 1});
  } catch (...) {
    give_back();  // nothing was queued
    throw;
  }
  if (!to.pageable) {
    if (src_bounce.handle) pool.release_after(src_bounce, core_, seqno);
    return;
  }
  try {
    s.wait(seqno);
  } catch (...) {
    if (src_bounce.handle) pool.release_after(src_bounce, core_, seqno);
    pool.release_after(dst_bounce, core_, seqno);
    throw;
  }
  std::memcpy(dst, dst_bounce.ptr, n);
  give_back();
}

void Stream::wait(const Event& event) {
  auto& s = live(core_, "wait");
  const auto& other = event.core();
  if (!other) return;  // never recorded: nothing to wait for
  EXPECTS(other->device() == s.device(), "Stream::wait: the event was recorded on another device");
  // A point on this stream itself is already in order; one already reached adds nothing.
  auto add = [&](const std::shared_ptr<detail::StreamCore>& on, std::uint64_t point) {
    if (point != 0 && on != core_ && !on->reached(point)) s.add_wait(on, point);
  };
  add(other, event.point());
  for (const auto& [on, point] : event.dependencies()) add(on, point);
}

void Stream::destroy() noexcept { core_.reset(); }

}  // namespace hostrt
