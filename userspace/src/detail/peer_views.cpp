#include "detail/peer_views.hpp"

#include <cerrno>
#include <string>
#include <utility>

#include "detail/device_core.hpp"
#include "hostrt/error.hpp"
#include "hostrt/unique_fd.hpp"

namespace hostrt::detail {

namespace {

bool same_device(const std::weak_ptr<DeviceCore>& a, const std::shared_ptr<DeviceCore>& b) noexcept {
  return !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

void AccessList::set(const std::shared_ptr<DeviceCore>& dev, bool allowed) {
  std::lock_guard lk(m_);
  std::erase_if(devices_,
                [&](const std::weak_ptr<DeviceCore>& w) { return w.expired() || same_device(w, dev); });
  if (allowed) devices_.push_back(dev);
}

bool AccessList::allows(const std::shared_ptr<DeviceCore>& dev) const {
  std::lock_guard lk(m_);
  for (const auto& w : devices_)
    if (same_device(w, dev)) return true;
  return false;
}

bool AccessList::empty() const {
  std::lock_guard lk(m_);
  for (const auto& w : devices_)
    if (!w.expired()) return false;
  return true;
}

PeerViews::PeerViews(const std::shared_ptr<DeviceCore>& owner, MemoryType type, void* ptr, std::size_t size,
                     std::uint32_t uapi_flags, std::shared_ptr<const AccessList> access) noexcept
    // weak_from_this: a default pool's segments name their device without owning it.
    : owner_(owner->weak_from_this()),
      type_(type),
      ptr_(ptr),
      size_(size),
      uapi_flags_(uapi_flags),
      access_(std::move(access)) {}

PeerViews::~PeerViews() { release(); }

void PeerViews::set_owner_handle(std::uint32_t handle) noexcept {
  std::lock_guard lk(m_);
  owner_handle_ = handle;
}

std::uint32_t PeerViews::handle_for(const std::shared_ptr<DeviceCore>& dev) {
  std::lock_guard lk(m_);
  if (released_)
    throw InvalidArgument(EINVAL, "portable memory used on device " + std::to_string(dev->index()) +
                                      " while it is being freed");
  if (same_device(owner_, dev)) return owner_handle_;
  if (access_ && !access_->allows(dev))
    throw WrongDevice(EXDEV,
                      "pool memory used on device " + std::to_string(dev->index()) +
                          ", which has no access to the pool (Pool::set_access / hrtMemPoolSetAccess)");
  for (const View& v : views_)
    if (same_device(v.dev, dev)) return v.bo.handle;
  // Reserve first so that a view, once made, is always released (push_back cannot throw then).
  views_.reserve(views_.size() + 1);
  views_.push_back({dev, make_view(*dev)});
  return views_.back().bo.handle;
}

BoMapping PeerViews::make_view(DeviceCore& dev) {
  DeviceBackend& be = dev.backend("portable memory");
  if (type_ == MemoryType::Registered) return be.register_user(ptr_, size_, uapi_flags_);
  auto owner = owner_.lock();
  if (!owner) throw DeviceLost(ENODEV, "portable memory: its device's internals are gone");
  if (owner->kind() != dev.kind())
    throw WrongDevice(EXDEV, std::string("portable memory of a ") + to_string(owner->kind()) +
                                 " device used on a " + to_string(dev.kind()) + " device");
  return be.share_from(owner->backend("portable memory (owning device)"), owner_handle_);
}

std::vector<std::shared_ptr<DeviceCore>> PeerViews::peers() {
  std::vector<std::shared_ptr<DeviceCore>> out;
  std::lock_guard lk(m_);
  for (const View& v : views_)
    if (auto d = v.dev.lock()) out.push_back(std::move(d));
  return out;
}

void PeerViews::release() noexcept {
  std::vector<View> doomed;
  {
    std::lock_guard lk(m_);
    released_ = true;
    doomed.swap(views_);
  }
  // A closed device still releases (its handles die with its file otherwise); a fork child
  // releases nothing of the parent's (backend_for_release is null there).
  for (const View& v : doomed)
    if (auto d = v.dev.lock())
      if (DeviceBackend* be = d->backend_for_release()) be->release_bo(v.bo);
}

}  // namespace hostrt::detail
