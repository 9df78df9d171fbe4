// vgem, the kernel's virtual GEM driver: buffers from its primary node (dumb buffers, mapped
// write-combined), PRIME, and fences a test attaches to a buffer and signals by hand. The
// peer of the dma-buf tests.
#pragma once

#include <drm_mode.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace edu_test {

// vgem's uapi (the kernel's include/uapi/drm/vgem_drm.h; libdrm does not ship it).
struct VgemFenceAttach {
  uint32_t handle;
  uint32_t flags;  // kVgemFenceWrite
  uint32_t out_fence;
  uint32_t pad;
};
struct VgemFenceSignal {
  uint32_t fence;
  uint32_t flags;
};
constexpr uint32_t kVgemFenceWrite = 0x1;
constexpr unsigned long kVgemFenceAttachIoctl = DRM_IOWR(DRM_COMMAND_BASE + 0x1, VgemFenceAttach);
constexpr unsigned long kVgemFenceSignalIoctl = DRM_IOW(DRM_COMMAND_BASE + 0x2, VgemFenceSignal);

struct VgemBo {
  uint32_t handle = 0;
  uint64_t size = 0;
  uint8_t* map = nullptr;
};

class Vgem {
 public:
  // Opens the card node whose driver is vgem; fd() < 0 when there is none.
  Vgem() {
    for (int i = 0; i < 16 && fd_ < 0; ++i) {
      int fd = open(("/dev/dri/card" + std::to_string(i)).c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) continue;
      drmVersionPtr v = drmGetVersion(fd);
      if (v && std::string(v->name, v->name_len) == "vgem")
        fd_ = fd;
      else
        close(fd);
      drmFreeVersion(v);
    }
  }
  Vgem(const Vgem&) = delete;
  Vgem& operator=(const Vgem&) = delete;
  ~Vgem() {
    for (auto& b : bos_) munmap(b.map, b.size);
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

  // A zeroed buffer of `bytes` (a multiple of 4096), mapped; handle 0 on failure.
  VgemBo create(uint64_t bytes) {
    VgemBo b;
    drm_mode_create_dumb c{};
    c.width = 1024;
    c.bpp = 32;
    c.height = static_cast<uint32_t>(bytes / 4096);
    if (drmIoctl(fd_, DRM_IOCTL_MODE_CREATE_DUMB, &c)) return b;
    drm_mode_map_dumb m{};
    m.handle = c.handle;
    if (drmIoctl(fd_, DRM_IOCTL_MODE_MAP_DUMB, &m)) return b;
    void* p = mmap(nullptr, c.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(m.offset));
    if (p == MAP_FAILED) return b;
    b = {c.handle, c.size, static_cast<uint8_t*>(p)};
    bos_.push_back(b);
    return b;
  }

  // A fence on the buffer's reservation (a writer's when `write`): work that has not ended.
  int attach_fence(uint32_t handle, bool write, uint32_t* fence) {
    VgemFenceAttach a{};
    a.handle = handle;
    a.flags = write ? kVgemFenceWrite : 0;
    if (drmIoctl(fd_, kVgemFenceAttachIoctl, &a)) return errno;
    *fence = a.out_fence;
    return 0;
  }
  int signal_fence(uint32_t fence) {
    VgemFenceSignal s{};
    s.fence = fence;
    return drmIoctl(fd_, kVgemFenceSignalIoctl, &s) ? errno : 0;
  }

 private:
  int fd_ = -1;
  std::vector<VgemBo> bos_;
};

}  // namespace edu_test
