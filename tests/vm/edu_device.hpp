// Raw access to an edu_accel render node for the driver's own in-VM tests: the UAPI structs
// and ioctls with nothing in between, so each test names the exact errno the driver returns.
#pragma once

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

#include "uapi/drm/edu_accel.h"

namespace edu_test {

// Owns one open render node.
class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(open(path.c_str(), O_RDWR | O_CLOEXEC)) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Returns 0 or the errno of a failed ioctl (drmIoctl restarts on EINTR/EAGAIN).
template <typename T>
int call(int fd, unsigned long request, T& arg) {
  return drmIoctl(fd, request, &arg) == 0 ? 0 : errno;
}

// The driver's sysfs directory: writing a PCI address to its unbind / bind detaches or
// attaches that device.
constexpr const char* kDriver = "/sys/bus/pci/drivers/edu_accel";

inline bool write_sysfs(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  f << value;
  f.flush();
  return static_cast<bool>(f);
}

inline int get_param(int fd, uint32_t param, uint64_t* value) {
  drm_edu_accel_get_param p{};
  p.param = param;
  int err = call(fd, DRM_IOCTL_EDU_ACCEL_GET_PARAM, p);
  if (!err) *value = p.value;
  return err;
}

inline uint64_t param(int fd, uint32_t which) {
  uint64_t v = 0;
  return get_param(fd, which, &v) == 0 ? v : ~0ull;
}

inline int bo_create(int fd, uint64_t size, uint32_t* handle, uint64_t* mmap_offset = nullptr) {
  drm_edu_accel_bo_create a{};
  a.size = size;
  int err = call(fd, DRM_IOCTL_EDU_ACCEL_BO_CREATE, a);
  if (!err) {
    *handle = a.handle;
    if (mmap_offset) *mmap_offset = a.mmap_offset;
  }
  return err;
}

inline int bo_userptr(int fd, const void* ptr, uint64_t size, uint32_t flags, uint32_t* handle) {
  drm_edu_accel_bo_userptr a{};
  a.user_ptr = reinterpret_cast<uintptr_t>(ptr);
  a.size = size;
  a.flags = flags;
  int err = call(fd, DRM_IOCTL_EDU_ACCEL_BO_USERPTR, a);
  if (!err) *handle = a.handle;
  return err;
}

inline int bo_info(int fd, uint32_t handle, drm_edu_accel_bo_info* info) {
  *info = {};
  info->handle = handle;
  return call(fd, DRM_IOCTL_EDU_ACCEL_BO_INFO, *info);
}

inline int gem_close(int fd, uint32_t handle) {
  drm_gem_close c{};
  c.handle = handle;
  return call(fd, DRM_IOCTL_GEM_CLOSE, c);
}

inline int queue_create(int fd, drm_edu_accel_queue_create* q) {
  *q = {};
  return call(fd, DRM_IOCTL_EDU_ACCEL_QUEUE_CREATE, *q);
}

inline int queue_destroy(int fd, uint32_t queue) {
  drm_edu_accel_queue_destroy d{};
  d.queue = queue;
  return call(fd, DRM_IOCTL_EDU_ACCEL_QUEUE_DESTROY, d);
}

inline drm_edu_accel_copy_op op(uint32_t type, uint32_t src, uint64_t src_off, uint32_t dst, uint64_t dst_off,
                                uint64_t size) {
  drm_edu_accel_copy_op o{};
  o.type = type;
  o.src_handle = src;
  o.src_offset = src_off;
  o.dst_handle = dst;
  o.dst_offset = dst_off;
  o.size = size;
  return o;
}

// One SUBMIT; syncs given as (handle, point) pairs. Returns 0 or errno; *seqno on success.
inline int submit(int fd, uint32_t queue, const drm_edu_accel_copy_op* ops, uint32_t nops,
                  const drm_edu_accel_sync* in, uint32_t nin, const drm_edu_accel_sync* out, uint32_t nout,
                  uint64_t* seqno = nullptr) {
  drm_edu_accel_submit s{};
  s.queue = queue;
  s.ops = DRM_EDU_ACCEL_OBJ_ARRAY(nops, ops);
  s.in_syncs = DRM_EDU_ACCEL_OBJ_ARRAY(nin, in);
  s.out_syncs = DRM_EDU_ACCEL_OBJ_ARRAY(nout, out);
  int err = call(fd, DRM_IOCTL_EDU_ACCEL_SUBMIT, s);
  if (!err && seqno) *seqno = s.seqno;
  return err;
}

// A binary syncobj's fence (point 0) or a point on its timeline.
inline drm_edu_accel_sync sync_point(uint32_t handle, uint64_t point = 0) {
  drm_edu_accel_sync s{};
  s.handle = handle;
  s.flags = point ? DRM_EDU_ACCEL_SYNC_TIMELINE : 0;
  s.point = point;
  return s;
}

// The file's completion page (every queue's slot, then the file status), mapped read-only;
// nullptr when GET_PARAM or mmap fails (errno says why). Unmap DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE.
inline const unsigned char* map_completion_page(int fd) {
  drm_edu_accel_get_param p{};
  p.param = DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET;
  if (call(fd, DRM_IOCTL_EDU_ACCEL_GET_PARAM, p)) return nullptr;
  void* m = mmap(nullptr, DRM_EDU_ACCEL_COMPLETION_PAGE_SIZE, PROT_READ, MAP_SHARED, fd,
                 static_cast<off_t>(p.value));
  return m == MAP_FAILED ? nullptr : static_cast<const unsigned char*>(m);
}

// CLOCK_MONOTONIC nanoseconds `seconds` from now: an absolute deadline for drmSyncobjWait.
inline uint64_t abs_deadline_ns(double seconds) {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec) +
         static_cast<uint64_t>(seconds * 1e9);
}

inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

// Every streaming mapping bounces through swiotlb (the bounce configuration).
inline bool bouncing() {
  std::ifstream in("/proc/cmdline");
  std::string cmdline;
  std::getline(in, cmdline);
  return cmdline.find("swiotlb=force") != std::string::npos;
}

}  // namespace edu_test
