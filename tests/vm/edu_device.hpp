// Raw access to an edu_accel render node for the driver's own in-VM tests: the UAPI structs
// and ioctls with nothing in between, so each test names the exact errno the driver returns.
#pragma once

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
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

inline bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::string(v) == value;
}

}  // namespace edu_test
