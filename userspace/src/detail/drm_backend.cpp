#include "detail/drm_backend.hpp"

#include <fcntl.h>
#include <linux/sync_file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xf86drm.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "detail/size_math.hpp"
#include "hostrt/error.hpp"
#include "hostrt/unique_fd.hpp"

namespace hostrt::detail {

namespace {

std::uint64_t to_u64(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

// The name and version of the driver behind fd, or "" when it is not a DRM device.
std::string driver_of(int fd, std::string* version = nullptr, int* major = nullptr) {
  drmVersionPtr v = drmGetVersion(fd);
  if (!v) return {};
  std::string name(v->name, v->name_len);
  if (version)
    *version = std::to_string(v->version_major) + "." + std::to_string(v->version_minor) + "." +
               std::to_string(v->version_patchlevel);
  if (major) *major = v->version_major;
  drmFreeVersion(v);
  return name;
}

}  // namespace

std::vector<std::string> edu_accel_render_nodes() {
  std::vector<std::string> nodes;
  const int n = drmGetDevices2(0, nullptr, 0);
  if (n <= 0) return nodes;
  std::vector<drmDevicePtr> devs(static_cast<std::size_t>(n));
  const int got = drmGetDevices2(0, devs.data(), n);
  for (int i = 0; i < got; ++i) {
    if (!(devs[i]->available_nodes & (1 << DRM_NODE_RENDER))) continue;
    const std::string node = devs[i]->nodes[DRM_NODE_RENDER];
    const int fd = ::open(node.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    if (driver_of(fd) == "edu_accel") nodes.push_back(node);
    ::close(fd);
  }
  if (got > 0) drmFreeDevices(devs.data(), got);
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

std::size_t drm_device_count() { return edu_accel_render_nodes().size(); }

std::unique_ptr<DeviceBackend> open_drm(std::size_t index) {
  const auto nodes = edu_accel_render_nodes();
  if (index >= nodes.size())
    throw DeviceLost(ENODEV, "no edu_accel device " + std::to_string(index) + " (" +
                                 std::to_string(nodes.size()) + " bound)");
  const int fd = ::open(nodes[index].c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw DeviceLost(err, "open " + nodes[index] + ": " + std::strerror(err));
  }
  std::string version;
  int major = 0;
  if (driver_of(fd, &version, &major) != "edu_accel") {
    ::close(fd);
    throw DeviceLost(ENODEV, nodes[index] + " is no longer an edu_accel device");
  }
  // The major changes only when the interface does: another one is not spoken here.
  if (major != DRM_EDU_ACCEL_VERSION_MAJOR) {
    ::close(fd);
    throw NotSupported(EPROTONOSUPPORT, nodes[index] + ": the driver speaks interface " + version +
                                            ", this runtime " + std::to_string(DRM_EDU_ACCEL_VERSION_MAJOR) +
                                            ".x: load the edu_accel.ko built from the same tree");
  }
  return std::make_unique<DrmBackend>(fd, nodes[index], version);
}

DrmBackend::DrmBackend(int fd, std::string node, std::string version)
    : fd_(fd), node_(std::move(node)), version_(std::move(version)) {}

DrmBackend::~DrmBackend() {
  if (page_) munmap(const_cast<unsigned char*>(page_), DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE);
  ::close(fd_);
}

std::uint64_t DrmBackend::client_id() {
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(fd_));
  std::string key;
  std::uint64_t id = 0;
  while (in >> key) {
    if (key == "drm-client-id:" && in >> id) return id;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;  // a driver older than its fdinfo
}

std::string DrmBackend::name() const { return "edu_accel " + version_ + " " + node_; }

std::uint64_t DrmBackend::get_param(std::uint32_t param) {
  drm_edu_accel_get_param a{};
  a.param = param;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_GET_PARAM, &a))
    throw_errno(errno, "GET_PARAM " + std::to_string(param));
  return a.value;
}

BoMapping DrmBackend::create_bo(std::size_t bytes) {
  drm_edu_accel_bo_create a{};
  a.size = bytes;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_BO_CREATE, &a))
    throw_errno(errno, "BO_CREATE of " + std::to_string(bytes) + " bytes");
  add_handle_user(a.handle);
  const std::size_t len = round_up(bytes, page_size());
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(a.mmap_offset));
  if (p == MAP_FAILED) {
    const int err = errno;
    release_bo({a.handle, nullptr, 0, 0});
    throw_errno(err, "mmap of BO " + std::to_string(a.handle));
  }
  return {a.handle, p, len, len};
}

BoMapping DrmBackend::register_user(void* ptr, std::size_t bytes, std::uint32_t uapi_flags) {
  drm_edu_accel_bo_userptr a{};
  a.user_ptr = to_u64(ptr);
  a.size = bytes;
  a.flags = uapi_flags;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_BO_USERPTR, &a))
    throw_errno(errno, "BO_USERPTR of " + std::to_string(bytes) + " bytes");
  add_handle_user(a.handle);
  return {a.handle, ptr, bytes, 0};
}

void DrmBackend::add_handle_user(std::uint32_t handle) {
  try {
    std::lock_guard lk(handles_m_);
    ++handle_users_[handle];
  } catch (...) {
    // Uncounted, so the caller's user is the only one: close it for the caller.
    if (last_handle_user(handle)) {
      drm_gem_close c{};
      c.handle = handle;
      drmIoctl(fd_, DRM_IOCTL_GEM_CLOSE, &c);
    }
    throw;
  }
}

bool DrmBackend::last_handle_user(std::uint32_t handle) noexcept {
  std::lock_guard lk(handles_m_);
  auto it = handle_users_.find(handle);
  if (it == handle_users_.end()) return true;
  if (--it->second) return false;
  handle_users_.erase(it);
  return true;
}

int DrmBackend::export_dmabuf(std::uint32_t handle) {
  int fd = -1;
  if (drmPrimeHandleToFD(fd_, handle, DRM_CLOEXEC | DRM_RDWR, &fd))
    throw_errno(errno, "PRIME export of BO " + std::to_string(handle));
  return fd;
}

BoMapping DrmBackend::import_dmabuf(int fd) {
  std::uint32_t handle = 0;
  if (drmPrimeFDToHandle(fd_, fd, &handle)) throw_errno(errno, "PRIME import of fd " + std::to_string(fd));
  add_handle_user(handle);
  auto undo = [&](int err, const std::string& what) {
    release_bo({handle, nullptr, 0, 0});
    throw_errno(err, what);
  };
  drm_edu_accel_bo_info info{};
  info.handle = handle;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_BO_INFO, &info)) undo(errno, "BO_INFO of an imported dma-buf");
  void* p = mmap(nullptr, info.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) undo(errno, "mmap of an imported dma-buf (its exporter must allow CPU mappings)");
  return {handle, p, info.size, info.size};
}

BoMapping DrmBackend::share_from(DeviceBackend& owner, std::uint32_t owner_handle) {
  // The owner's BO as a dma-buf, imported here: PRIME gives this file a handle to the same
  // pages (the same GEM object when owner is another file of this device).
  const UniqueFd fd(owner.export_dmabuf(owner_handle));
  std::uint32_t handle = 0;
  if (drmPrimeFDToHandle(fd_, fd.get(), &handle))
    throw_errno(errno, "PRIME import of BO " + std::to_string(owner_handle) + " of " + owner.name());
  add_handle_user(handle);
  return {handle, nullptr, 0, 0};
}

SyncPoint DrmBackend::import_point(DeviceBackend& other, std::uint32_t timeline, std::uint64_t point,
                                   std::shared_ptr<const void> /*keep: the kernel holds the fence*/) {
  auto* o = dynamic_cast<DrmBackend*>(&other);
  if (o == nullptr) throw_errno(EINVAL, "import_point: the other device is not a driver device");
  // The point's fence, through a binary syncobj of the other file and a sync_file, into a
  // binary syncobj of ours: syncobjs are per file, fences are not.
  std::uint32_t tmp = 0;
  if (drmSyncobjCreate(o->fd_, 0, &tmp)) throw_errno(errno, "SYNCOBJ_CREATE on " + o->name());
  int sync_fd = -1;
  int err = drmSyncobjTransfer(o->fd_, tmp, 0, timeline, point, 0) ? errno : 0;
  if (!err && drmSyncobjExportSyncFile(o->fd_, tmp, &sync_fd)) err = errno;
  drmSyncobjDestroy(o->fd_, tmp);
  if (err)
    throw_errno(err, "export of point " + std::to_string(point) + " of " + o->name() + " as a sync_file");
  const UniqueFd fence(sync_fd);
  std::uint32_t mine = 0;
  if (drmSyncobjCreate(fd_, 0, &mine)) throw_errno(errno, "SYNCOBJ_CREATE");
  if (drmSyncobjImportSyncFile(fd_, mine, fence.get())) {
    err = errno;
    drmSyncobjDestroy(fd_, mine);
    throw_errno(err, "import of another device's sync_file");
  }
  return {mine, 0, 0};  // binary: its one fence
}

void DrmBackend::release_bo(const BoMapping& bo) noexcept {
  if (bo.map_len) munmap(bo.ptr, bo.map_len);
  if (!last_handle_user(bo.handle)) return;
  drm_gem_close c{};
  c.handle = bo.handle;
  drmIoctl(fd_, DRM_IOCTL_GEM_CLOSE, &c);  // jobs still naming the BO hold their own references
}

// The file's completion page, mapped once: every queue's slot and the file status.
const unsigned char* DrmBackend::completion_page() {
  std::lock_guard lk(page_m_);
  if (page_) return page_;
  drm_edu_accel_get_param p{};
  p.param = DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_GET_PARAM, &p))
    throw_errno(errno, "GET_PARAM COMPLETION_MMAP_OFFSET");
  void* m = mmap(nullptr, DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE, PROT_READ, MAP_SHARED, fd_,
                 static_cast<off_t>(p.value));
  if (m == MAP_FAILED) throw_errno(errno, "mmap of the completion page");
  const auto* page = static_cast<const unsigned char*>(m);
  drm_edu_accel_file_status st{};
  std::memcpy(&st, page + DRM_EDU_ACCEL_FILE_STATUS_OFFSET, sizeof(st));
  if (st.layout != DRM_EDU_ACCEL_COMPLETION_LAYOUT) {
    munmap(m, DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE);
    throw SystemError(EPROTO, "the completion page has layout " + std::to_string(st.layout) +
                                  ", this runtime reads " + std::to_string(DRM_EDU_ACCEL_COMPLETION_LAYOUT));
  }
  page_ = page;
  return page_;
}

const std::uint64_t* DrmBackend::invalidation_counter() {
  static_assert(sizeof(drm_edu_accel_file_status::invalidations) == sizeof(std::uint64_t));
  return reinterpret_cast<const std::uint64_t*>(completion_page() + DRM_EDU_ACCEL_FILE_STATUS_OFFSET +
                                                offsetof(drm_edu_accel_file_status, invalidations));
}

bool DrmBackend::registration_stale(std::uint32_t handle) {
  drm_edu_accel_bo_info info{};
  info.handle = handle;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_BO_INFO, &info)) throw_errno(errno, "BO_INFO");
  return (info.flags & DRM_EDU_ACCEL_BO_INFO_INVALIDATED) != 0;
}

QueueInfo DrmBackend::create_queue(std::uint32_t priority) {
  drm_edu_accel_queue_create a{};
  a.priority = priority;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_QUEUE_CREATE, &a)) throw_errno(errno, "QUEUE_CREATE");
  try {
    const unsigned char* page = completion_page();
    if (a.completion_offset + sizeof(Completion) > DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE)
      throw SystemError(EPROTO, "QUEUE_CREATE: completion offset " + std::to_string(a.completion_offset) +
                                    " outside the page");
    return {a.queue, reinterpret_cast<const Completion*>(page + a.completion_offset)};
  } catch (...) {
    destroy_queue(a.queue);
    throw;
  }
}

void DrmBackend::destroy_queue(std::uint32_t queue) noexcept {
  drm_edu_accel_queue_destroy a{};
  a.queue = queue;
  drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_QUEUE_DESTROY, &a);
}

std::uint32_t DrmBackend::create_timeline() {
  std::uint32_t h = 0;
  if (drmSyncobjCreate(fd_, 0, &h)) throw_errno(errno, "SYNCOBJ_CREATE");
  return h;
}

void DrmBackend::destroy_timeline(std::uint32_t handle) noexcept { drmSyncobjDestroy(fd_, handle); }

void DrmBackend::wait_timeline(std::uint32_t handle, std::uint64_t point) {
  // WAIT_FOR_SUBMIT: the point's fence may be attached by a submit that is still returning.
  const int r = drmSyncobjTimelineWait(
      fd_, &handle, &point, 1, INT64_MAX,
      DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL | DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, nullptr);
  if (r) throw_errno(r < 0 && r != -1 ? -r : errno, "SYNCOBJ_TIMELINE_WAIT point " + std::to_string(point));
}

std::uint32_t DrmBackend::hold_point(std::uint32_t timeline, std::uint64_t point) {
  std::uint32_t h = 0;
  if (drmSyncobjCreate(fd_, 0, &h)) throw_errno(errno, "SYNCOBJ_CREATE");
  // The point's own fence (the chain link of its job), not the timeline's: that one moves on.
  // A point that signalled meanwhile may come back as the kernel's stub fence, whose old
  // timestamp the caller's own clock reading bounds.
  if (drmSyncobjTransfer(fd_, h, 0, timeline, point, 0)) {
    const int err = errno;
    drmSyncobjDestroy(fd_, h);
    throw_errno(err, "SYNCOBJ_TRANSFER of point " + std::to_string(point));
  }
  return h;
}

std::int64_t DrmBackend::held_point_time_ns(std::uint32_t hold) {
  // The completion page shows a job ended a moment before its fence signals.
  if (const int r = drmSyncobjWait(fd_, &hold, 1, INT64_MAX, DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, nullptr))
    throw_errno(r < 0 && r != -1 ? -r : errno, "SYNCOBJ_WAIT on a held point");
  int sync_fd = -1;
  if (drmSyncobjExportSyncFile(fd_, hold, &sync_fd))
    throw_errno(errno, "export of a held point as a sync_file");
  const UniqueFd file(sync_fd);
  // The chain link unwraps into its job's fence and the earlier links not yet collected, all
  // signalled: the latest of their timestamps is the point's.
  sync_file_info info{};
  if (ioctl(file.get(), SYNC_IOC_FILE_INFO, &info)) throw_errno(errno, "SYNC_IOC_FILE_INFO");
  std::vector<sync_fence_info> fences(std::max<std::uint32_t>(info.num_fences, 1));
  info = {};
  info.num_fences = static_cast<std::uint32_t>(fences.size());
  info.sync_fence_info = to_u64(fences.data());
  if (ioctl(file.get(), SYNC_IOC_FILE_INFO, &info)) throw_errno(errno, "SYNC_IOC_FILE_INFO");
  std::int64_t latest = -1;
  for (std::uint32_t i = 0; i < info.num_fences; ++i)
    latest = std::max(latest, static_cast<std::int64_t>(fences[i].timestamp_ns));
  if (latest < 0) throw_errno(EPROTO, "a held point's sync_file holds no fence");
  return latest;
}

void DrmBackend::release_point_hold(std::uint32_t hold) noexcept { drmSyncobjDestroy(fd_, hold); }

namespace {
// The element size this binary was built with travels along: the driver accepts older and
// newer element layouts.
template <typename T>
drm_edu_accel_obj_array array_of(std::span<const T> items) {
  return {static_cast<std::uint32_t>(sizeof(T)), static_cast<std::uint32_t>(items.size()),
          to_u64(items.data())};
}
}  // namespace

std::uint64_t DrmBackend::submit(std::uint32_t queue, std::span<const CopyOp> ops,
                                 std::span<const SyncPoint> in_syncs, std::span<const SyncPoint> out_syncs) {
  drm_edu_accel_submit a{};
  a.queue = queue;
  a.ops = array_of(ops);
  a.in_syncs = array_of(in_syncs);
  a.out_syncs = array_of(out_syncs);
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_SUBMIT, &a))
    throw_errno(errno, "SUBMIT on queue " + std::to_string(queue));
  return a.seqno;
}

}  // namespace hostrt::detail
