// In-VM suite for buffer objects: driver-allocated pinned memory (BO_CREATE), pinned user
// ranges (BO_USERPTR), their scatter-gather layout, RLIMIT_MEMLOCK accounting and every
// error path of the ioctls. Runs as root inside the test VM, with and without an IOMMU.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"
#include "proc_util.hpp"

using namespace edu_test;

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = 1 << 20;

uint64_t page_align(uint64_t n) { return (n + kPage - 1) & ~(kPage - 1); }

// An anonymous mapping that unmaps itself.
class Mapping {
 public:
  Mapping(size_t bytes, int prot, int flags = MAP_PRIVATE | MAP_ANONYMOUS, int fd = -1, off_t off = 0)
      : bytes_(bytes), p_(mmap(nullptr, bytes, prot, flags, fd, off)) {}
  ~Mapping() {
    if (ok()) munmap(p_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  bool ok() const { return p_ != MAP_FAILED; }
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_;
  void* p_;
};

class BoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto nodes = hostrt::detail::bound_edu_nodes();
    ASSERT_FALSE(nodes.empty()) << "no edu_accel device";
    node_ = nodes[0].render;
    debugfs_ = nodes[0].debugfs;
    fd_ = std::make_unique<Fd>(node_);
    ASSERT_GE(fd(), 0) << node_;
    pins_before_ = pins_outstanding();
  }
  void TearDown() override {
    fd_.reset();
    // Closing the file released every handle: nothing may stay pinned (a finished job's
    // references go when the driver's release worker runs, a moment later).
    for (int i = 0; i < 3000 && pins_outstanding() != pins_before_; ++i) usleep(10000);
    EXPECT_EQ(pins_outstanding(), pins_before_) << "pinned pages left after closing the file";
  }
  int fd() const { return fd_->get(); }
  bool iommu() const { return param(fd(), DRM_EDU_ACCEL_PARAM_IOMMU) == 1; }

  // The SG table must have one entry per physically contiguous run, and the DMA side one
  // segment with an IOMMU (everything fits in the max segment) or as many as the CPU side.
  void expect_layout(uint32_t handle, const void* addr, size_t bytes) {
    drm_edu_accel_bo_info info;
    ASSERT_EQ(bo_info(fd(), handle, &info), 0);
    auto pfn = pfns(addr, bytes);
    ASSERT_FALSE(pfn.empty());
    for (auto p : pfn) ASSERT_NE(p, 0u) << "page not present or pagemap unreadable";
    const uint64_t max_seg = param(fd(), DRM_EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE);
    EXPECT_EQ(info.sg_nents, contiguous_runs(pfn, max_seg));
    if (iommu())
      EXPECT_EQ(info.dma_nents, 1u);
    else
      EXPECT_EQ(info.dma_nents, info.sg_nents);
  }

  std::string node_;
  std::string debugfs_;
  std::unique_ptr<Fd> fd_;
  int64_t pins_before_ = 0;
};

TEST_F(BoTest, GetParamReportsTheMachine) {
  // One version: the header's, reported alike by GET_PARAM and DRM_IOCTL_VERSION.
  const uint64_t v = param(fd(), DRM_EDU_ACCEL_PARAM_DRIVER_VERSION);
  EXPECT_EQ(v, (uint64_t{DRM_EDU_ACCEL_VERSION_MAJOR} << 16) | DRM_EDU_ACCEL_VERSION_MINOR);
  if (drmVersionPtr dv = drmGetVersion(fd())) {
    EXPECT_EQ(static_cast<uint64_t>(dv->version_major), v >> 16);
    EXPECT_EQ(static_cast<uint64_t>(dv->version_minor), v & 0xffff);
    drmFreeVersion(dv);
  } else {
    ADD_FAILURE() << "DRM_IOCTL_VERSION failed";
  }
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_MAX_SYNCS), 16u);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_MAX_JOB_BYTES), 16u << 20);
  const char* mask = std::getenv("VM_DMA_MASK");
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS), mask && *mask ? 64u : 28u);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE), 4096u);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_MAX_TRANSFER), 4095u);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_IOMMU), env_is("VM_IOMMU", "on") ? 1u : 0u);
  EXPECT_GE(param(fd(), DRM_EDU_ACCEL_PARAM_MAX_BO_SIZE), 64 * kMiB);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES), 0u);
}

class BoCreateSize : public BoTest, public ::testing::WithParamInterface<uint64_t> {};

TEST_P(BoCreateSize, IsZeroedSharedAndReadsBackWhatWasWritten) {
  const uint64_t size = GetParam();
  uint32_t h = 0;
  uint64_t off = 0;
  ASSERT_EQ(bo_create(fd(), size, &h, &off), 0);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(fd(), h, &info), 0);
  EXPECT_EQ(info.size, page_align(size));
  EXPECT_EQ(info.flags, 0u);
  EXPECT_EQ(info.mmap_offset, off);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES), page_align(size));

  Mapping a(info.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd(), static_cast<off_t>(off));
  Mapping b(info.size, PROT_READ, MAP_SHARED, fd(), static_cast<off_t>(off));
  ASSERT_TRUE(a.ok() && b.ok()) << strerror(errno);
  for (uint64_t i = 0; i < info.size; i += 512) ASSERT_EQ(a.data()[i], 0) << "not zeroed at " << i;
  std::mt19937 rng(static_cast<unsigned>(size));
  for (uint64_t i = 0; i < info.size; i += 64) a.data()[i] = static_cast<uint8_t>(rng());
  rng.seed(static_cast<unsigned>(size));
  // The second mapping sees the same pages, so writes through one read back through the other.
  for (uint64_t i = 0; i < info.size; i += 64) ASSERT_EQ(b.data()[i], static_cast<uint8_t>(rng())) << i;
  expect_layout(h, a.data(), info.size);
  EXPECT_EQ(gem_close(fd(), h), 0);
}

INSTANTIATE_TEST_SUITE_P(Sizes, BoCreateSize,
                         ::testing::Values(1, kPage, kPage + 1, 3 * kPage - 100, kMiB, 64 * kMiB));

TEST_F(BoTest, CreatedBoOutlivesItsHandleWhileMapped) {
  uint32_t h = 0;
  uint64_t off = 0;
  ASSERT_EQ(bo_create(fd(), 2 * kPage, &h, &off), 0);
  Mapping m(2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd(), static_cast<off_t>(off));
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(gem_close(fd(), h), 0);
  std::memset(m.data(), 0x5a, 2 * kPage);  // still backed: the mapping holds the BO
  EXPECT_EQ(m.data()[2 * kPage - 1], 0x5a);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES), 2 * kPage);
}

TEST_F(BoTest, PrivateMappingOfABoIsRefused) {
  uint32_t h = 0;
  uint64_t off = 0;
  ASSERT_EQ(bo_create(fd(), kPage, &h, &off), 0);
  Mapping m(kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd(), static_cast<off_t>(off));
  EXPECT_FALSE(m.ok());
  EXPECT_EQ(errno, EINVAL);
}

struct UserRange {
  const char* name;
  size_t lead;   // bytes before the registered start, inside the mapping
  size_t bytes;  // registered length
};

void PrintTo(const UserRange& r, std::ostream* os) { *os << r.name; }

class UserptrSize : public BoTest, public ::testing::WithParamInterface<UserRange> {};

TEST_P(UserptrSize, PinsTheCoveringPagesAndReleasesThemOnClose) {
  const UserRange r = GetParam();
  Mapping m(page_align(r.lead + r.bytes) + kPage, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(m.ok());
  std::memset(m.data(), 0x11, m.size());
  uint8_t* start = m.data() + r.lead;
  const uint64_t first = reinterpret_cast<uintptr_t>(start) & ~(kPage - 1);
  const uint64_t end = page_align(reinterpret_cast<uintptr_t>(start) + r.bytes);
  const int64_t npages = static_cast<int64_t>((end - first) / kPage);

  uint32_t h = 0;
  ASSERT_EQ(bo_userptr(fd(), start, r.bytes, 0, &h), 0);
  EXPECT_EQ(pins_outstanding() - pins_before_, npages);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES), static_cast<uint64_t>(npages) * kPage);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(fd(), h, &info), 0);
  EXPECT_EQ(info.size, r.bytes);
  EXPECT_EQ(info.user_ptr, reinterpret_cast<uintptr_t>(start));
  EXPECT_EQ(info.flags, static_cast<uint32_t>(DRM_EDU_ACCEL_BO_INFO_USERPTR));
  EXPECT_EQ(info.mmap_offset, 0u);
  expect_layout(h, start, r.bytes);

  ASSERT_EQ(gem_close(fd(), h), 0);
  EXPECT_EQ(pins_outstanding(), pins_before_);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES), 0u);
}

INSTANTIATE_TEST_SUITE_P(Ranges, UserptrSize,
                         ::testing::Values(UserRange{"OneByte", 0, 1}, UserRange{"OnePage", 0, kPage},
                                           UserRange{"UnalignedBoth", 100, 2 * kPage + 50},
                                           UserRange{"UnalignedEndOnly", 0, kPage + 1},
                                           UserRange{"OneMiB", 0, kMiB},
                                           UserRange{"SixtyFourMiB", 0, 64 * kMiB}),
                         [](const auto& info) { return std::string(info.param.name); });

// Root studies the DMA path in debugfs: each BO, found by its handle and user address, with
// its physical runs and the bus segments the device sees (below the DMA mask; one with the
// IOMMU, which maps the runs to one contiguous IOVA range).
TEST_F(BoTest, DebugfsShowsTheLayoutOfEachBo) {
  const auto nodes = hostrt::detail::bound_edu_nodes();
  Mapping m(3 * kPage, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(m.ok());
  std::memset(m.data(), 7, m.size());
  uint32_t h = 0;
  ASSERT_EQ(bo_userptr(fd(), m.data() + 10, 2 * kPage, 0, &h), 0);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(fd(), h, &info), 0);
  const auto text = hostrt::detail::read_text(nodes[0].debugfs + "/bos");
  ASSERT_TRUE(text);
  std::ostringstream id;
  id << "handle=" << h << " user=0x" << std::hex << reinterpret_cast<std::uintptr_t>(m.data() + 10)
     << std::dec << " userptr size=" << 2 * kPage << " offset=10 pages=3 sg_nents=" << info.sg_nents
     << " dma_nents=" << info.dma_nents << " mapped=1 invalidated=0 need_sync=";
  const size_t pos = text->find(id.str());
  ASSERT_NE(pos, std::string::npos) << "no line with " << id.str() << " in\n" << *text;
  // Ownership transfers do work only where the DMA layer says so (dma_need_sync()): with
  // dma-direct, where it bounces; 6.1's dma-iommu says yes for every address.
  const char need_sync = (*text)[pos + id.str().size()];
  if (!iommu()) {
    EXPECT_EQ(need_sync, bouncing() ? '1' : '0');
  }
  // Every physical run of that BO is listed with its address, adding up to its 3 pages, and
  // every bus segment lies below the device's mask and covers the same bytes.
  const unsigned mask_bits = static_cast<unsigned>(param(fd(), DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS));
  size_t bytes = 0, runs = 0, dma_bytes = 0, segments = 0;
  std::istringstream lines(text->substr(pos));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && line.rfind("  ", 0) == 0) {
    const size_t len = std::stoul(line.substr(line.find("len=") + 4));
    if (line.rfind("  sg ", 0) == 0) {
      ++runs;
      bytes += len;
    } else if (line.rfind("  dma ", 0) == 0) {
      ++segments;
      dma_bytes += len;
      const uint64_t addr = std::stoull(line.substr(line.find("addr=") + 5), nullptr, 16);
      if (mask_bits < 64) {
        EXPECT_LE(addr + len, uint64_t{1} << mask_bits) << line;
      }
    }
  }
  EXPECT_EQ(runs, info.sg_nents);
  EXPECT_EQ(bytes, 3 * kPage);
  EXPECT_EQ(segments, info.dma_nents);
  EXPECT_EQ(dma_bytes, 3 * kPage);
  if (iommu()) {
    EXPECT_EQ(segments, 1u) << "the IOMMU maps the runs as one IOVA range";
  }
}

TEST_F(BoTest, ReadOnlyRegistrationOfReadOnlyMemorySucceeds) {
  Mapping m(4 * kPage, PROT_READ);
  ASSERT_TRUE(m.ok());
  uint32_t h = 0;
  ASSERT_EQ(bo_userptr(fd(), m.data(), m.size(), DRM_EDU_ACCEL_BO_USERPTR_READONLY, &h), 0);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(fd(), h, &info), 0);
  EXPECT_EQ(info.flags,
            static_cast<uint32_t>(DRM_EDU_ACCEL_BO_INFO_USERPTR | DRM_EDU_ACCEL_BO_INFO_READONLY));
}

TEST_F(BoTest, ProcessExitReleasesItsPins) {
  const int64_t before = pins_outstanding();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child registers and leaves without closing anything.
    Fd child(node_);
    Mapping m(kMiB, PROT_READ | PROT_WRITE);
    uint32_t h = 0;
    _exit(child.get() >= 0 && m.ok() && bo_userptr(child.get(), m.data(), kMiB, 0, &h) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(pins_outstanding(), before);
}

// Runs body in a child that has dropped root (so CAP_IPC_LOCK) under a MEMLOCK limit; the
// child inherits already-open render nodes, and `handoff` becomes the child's alone (the
// parent closes its copy). Returns the child's exit code.
template <typename Body>
int as_unprivileged(rlim_t memlock, Body body, Fd* handoff = nullptr) {
  pid_t pid = fork();
  if (pid > 0 && handoff) handoff->reset();
  if (pid == 0) {
    rlimit lim{memlock, memlock};
    if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(90);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
}

TEST_F(BoTest, MemlockLimitBoundsUnprivilegedPinsAndCloseReturnsTheCharge) {
  Fd second(node_), third(node_);
  ASSERT_GE(second.get(), 0);
  ASSERT_GE(third.get(), 0);
  const int a = third.get(), b = second.get();
  const int rc = as_unprivileged(
      16 * kPage,
      [a, b] {
        Mapping m(32 * kPage, PROT_READ | PROT_WRITE);
        if (!m.ok()) return 10;
        uint32_t h1 = 0, h2 = 0;
        if (bo_userptr(a, m.data(), 12 * kPage, 0, &h1) != 0) return 11;              // within the limit
        if (bo_userptr(a, m.data(), 8 * kPage, 0, &h2) != ENOMEM) return 12;          // 20 pages > 16
        if (bo_userptr(b, m.data() + 12 * kPage, 4 * kPage, 0, &h2) != 0) return 13;  // exactly 16
        if (gem_close(a, h1) != 0) return 14;                                         // returns 12
        if (bo_userptr(a, m.data(), 12 * kPage, 0, &h1) != 0) return 15;
        close(a);  // the last reference to that file: returns 12
        if (bo_userptr(b, m.data(), 12 * kPage, 0, &h1) != 0) return 16;
        return 0;
      },
      &third);
  EXPECT_EQ(rc, 0) << "step " << rc << " of the memlock sequence failed";
}

// BO_CREATE pins memory too: charged like BO_USERPTR, else any user could pin all of RAM.
TEST_F(BoTest, MemlockLimitBoundsCreatedBosToo) {
  const int a = fd();
  const int rc = as_unprivileged(16 * kPage, [a] {
    uint32_t h1 = 0, h2 = 0;
    if (bo_create(a, 12 * kPage, &h1) != 0) return 1;      // within the limit
    if (bo_create(a, 8 * kPage, &h2) != ENOMEM) return 2;  // 20 pages > 16
    if (bo_create(a, 4 * kPage, &h2) != 0) return 3;       // exactly 16
    if (gem_close(a, h1) != 0) return 4;                   // returns 12
    if (bo_create(a, 12 * kPage, &h1) != 0) return 5;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "step " << rc << " of the BO_CREATE memlock sequence failed";
}

// The budget is the user's (io_uring's rule), not the process's: a fork child of an
// unprivileged process, on the same file, shares it (before, the child's fresh mm started a
// fresh budget: 12 + 8 pages under a 16-page limit both succeeded), and so does another
// process of the same user on its own file.
TEST_F(BoTest, MemlockBudgetIsTheUsersAcrossForkAndFiles) {
  Fd second(node_);
  ASSERT_GE(second.get(), 0);
  const int a = fd(), b = second.get();
  const int rc = as_unprivileged(16 * kPage, [a, b] {
    uint32_t h1 = 0, h2 = 0;
    if (bo_create(a, 12 * kPage, &h1) != 0) return 1;
    const pid_t child = fork();
    if (child == 0) {
      uint32_t h = 0;
      if (bo_create(a, 8 * kPage, &h) != ENOMEM) _exit(2);  // 12 + 8 > 16, same user
      if (bo_create(b, 8 * kPage, &h) != ENOMEM) _exit(3);  // another file, same user
      if (bo_create(a, 4 * kPage, &h) != 0) _exit(4);       // exactly 16
      if (gem_close(a, h) != 0) _exit(5);
      _exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 6;
    if (WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
    if (gem_close(a, h1) != 0) return 7;  // the whole budget is back
    if (bo_create(b, 16 * kPage, &h2) != 0) return 8;
    if (gem_close(b, h2) != 0) return 9;
    return 0;
  });
  EXPECT_EQ(rc, 0) << "step " << rc << " of the per-user memlock sequence failed";
}

// MADV_DONTNEED drops the page table entries of a BO mapping: the next touch must fault the
// same pinned page back in (not SIGBUS), with the bytes the device sees.
TEST_F(BoTest, CreatedBoMappingSurvivesMadvDontneed) {
  uint32_t h = 0;
  uint64_t off = 0;
  ASSERT_EQ(bo_create(fd(), 4 * kPage, &h, &off), 0);
  Mapping m(4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd(), static_cast<off_t>(off));
  ASSERT_TRUE(m.ok());
  std::memset(m.data(), 0x5a, 4 * kPage);
  ASSERT_EQ(madvise(m.data(), 4 * kPage, MADV_DONTNEED), 0);
  for (size_t i = 0; i < 4 * kPage; i += 511) ASSERT_EQ(m.data()[i], 0x5a) << "at " << i;
}

// A child must not share the parent's pinned BO pages: its writes would land in memory the
// parent (and the device) use. The mapping is simply absent in the child.
TEST_F(BoTest, ForkedChildDoesNotInheritBoMappings) {
  uint32_t h = 0;
  uint64_t off = 0;
  ASSERT_EQ(bo_create(fd(), kPage, &h, &off), 0);
  Mapping m(kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd(), static_cast<off_t>(off));
  ASSERT_TRUE(m.ok());
  m.data()[0] = 1;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    m.data()[0] = 2;  // faults in the child: no mapping there
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
      << "the child wrote through an inherited mapping";
  EXPECT_EQ(m.data()[0], 1);
}

// Long-term write pins of a regular file's pages are refused (as io_uring does; a private
// mapping would pin copies the file never sees, a shared one pages under writeback); tmpfs
// (shmem) and anonymous memory are fine, and so is a read-only pin.
TEST_F(BoTest, WritablePinOfAFileMappingIsRefused) {
  int f = open("/proc/self/exe", O_RDONLY);  // on the host's 9p share
  ASSERT_GE(f, 0);
  Mapping m(4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, f, 0);
  ASSERT_TRUE(m.ok());
  uint32_t h = 0;
  EXPECT_EQ(bo_userptr(fd(), m.data(), 4 * kPage, 0, &h), EOPNOTSUPP);
  EXPECT_EQ(bo_userptr(fd(), m.data(), 4 * kPage, DRM_EDU_ACCEL_BO_USERPTR_READONLY, &h), 0);
  gem_close(fd(), h);
  close(f);
  int t = open("/tmp/userptr-shmem", O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(t, 0);
  ASSERT_EQ(ftruncate(t, 4 * kPage), 0);
  Mapping tm(4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, t, 0);
  ASSERT_TRUE(tm.ok());
  EXPECT_EQ(bo_userptr(fd(), tm.data(), 4 * kPage, 0, &h), 0) << "tmpfs is shmem: allowed";
  gem_close(fd(), h);
  close(t);
  unlink("/tmp/userptr-shmem");
}

// The mapping check runs before the pin and mmap() into a hole of the range fires no
// notifier: a regular file's page mapped there meanwhile must still not be pinned for
// writing. ramfs stands in for a filesystem with writeback (page cache, not shmem); the
// driver's fault_pin_delay_ms knob opens the window between the check and the pin.
TEST_F(BoTest, AFileMappedIntoAHoleDuringTheWritePinIsRefused) {
  const std::string dir = "/tmp/edu-ramfs";
  mkdir(dir.c_str(), 0700);
  ASSERT_EQ(mount("none", dir.c_str(), "ramfs", 0, nullptr), 0) << strerror(errno);
  const int f = open((dir + "/page").c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(f, 0);
  ASSERT_EQ(ftruncate(f, kPage), 0);
  Mapping m(3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(m.ok());
  std::memset(m.data(), 1, 3 * kPage);
  uint8_t* hole = m.data() + kPage;
  ASSERT_EQ(munmap(hole, kPage), 0);
  ASSERT_TRUE(write_sysfs(debugfs_ + "/fault_pin_delay_ms", "3000"));
  std::atomic<bool> mapped{false};
  std::thread filler([&] {
    usleep(300 * 1000);  // guest time; the pin waits 3 s after its check
    void* p = mmap(hole, kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, f, 0);
    mapped = p == hole;
  });
  uint32_t h = 0;
  const int err = bo_userptr(fd(), m.data(), 3 * kPage, 0, &h);
  filler.join();
  write_sysfs(debugfs_ + "/fault_pin_delay_ms", "0");
  ASSERT_TRUE(mapped.load()) << "the file was not mapped into the hole";
  if (err == 0) gem_close(fd(), h);
  EXPECT_EQ(err, EOPNOTSUPP) << "a regular file's page was pinned for writing through the hole";
  // Without the race the mapping check refuses it, and a read-only pin is fine.
  EXPECT_EQ(bo_userptr(fd(), m.data(), 3 * kPage, 0, &h), EOPNOTSUPP);
  ASSERT_EQ(bo_userptr(fd(), m.data(), 3 * kPage, DRM_EDU_ACCEL_BO_USERPTR_READONLY, &h), 0);
  gem_close(fd(), h);
  munmap(hole, kPage);
  close(f);
  umount(dir.c_str());
}

// The file's status in its completion page, mapped read-only.
const volatile drm_edu_accel_file_status* file_status(int fd) {
  const unsigned char* page = map_completion_page(fd);
  if (!page) return nullptr;
  return reinterpret_cast<const volatile drm_edu_accel_file_status*>(page + DRM_EDU_ACCEL_FILE_STATUS_OFFSET);
}

uint32_t bo_flags(int fd, uint32_t h) {
  drm_edu_accel_bo_info info;
  return bo_info(fd, h, &info) ? ~0u : info.flags;
}

// A registration outlives the mapping it was made from: after munmap + mmap at the same
// address the BO still pins the old pages, so the driver marks it invalid, counts it in the
// file status (what a registration cache checks) and refuses it in SUBMIT.
TEST_F(BoTest, UserptrIsInvalidatedWhenItsRangeIsRemapped) {
  auto* st = file_status(fd());
  ASSERT_NE(st, nullptr);
  const uint64_t before = st->invalidations;
  void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  uint32_t h = 0, keep = 0, dst = 0;
  // Never touched: the write pin itself breaks copy-on-write, which must not count.
  ASSERT_EQ(bo_userptr(fd(), p, 4 * kPage, 0, &h), 0);
  EXPECT_EQ(bo_flags(fd(), h) & DRM_EDU_ACCEL_BO_INFO_INVALIDATED, 0u);
  ASSERT_EQ(mprotect(p, 4 * kPage, PROT_READ), 0);  // same pages: still valid
  ASSERT_EQ(mprotect(p, 4 * kPage, PROT_READ | PROT_WRITE), 0);
  pid_t pid = fork();  // a pinned page stays the parent's
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(bo_flags(fd(), h) & DRM_EDU_ACCEL_BO_INFO_INVALIDATED, 0u);
  EXPECT_EQ(st->invalidations, before);

  ASSERT_EQ(munmap(p, 4 * kPage), 0);
  void* q = mmap(p, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  ASSERT_EQ(q, p);
  EXPECT_EQ(st->invalidations, before + 1);
  EXPECT_NE(bo_flags(fd(), h) & DRM_EDU_ACCEL_BO_INFO_INVALIDATED, 0u);
  drm_edu_accel_queue_create qc;
  ASSERT_EQ(queue_create(fd(), &qc), 0);
  ASSERT_EQ(bo_create(fd(), 4 * kPage, &dst), 0);
  auto o = op(DRM_EDU_ACCEL_OP_H2H, h, 0, dst, 0, 100);
  EXPECT_EQ(submit(fd(), qc.queue, &o, 1, nullptr, 0, nullptr, 0), ESTALE);
  // Registered again, the range is good.
  ASSERT_EQ(bo_userptr(fd(), p, 4 * kPage, 0, &keep), 0);
  o = op(DRM_EDU_ACCEL_OP_H2H, keep, 0, dst, 0, 100);
  uint32_t done = 0;
  ASSERT_EQ(drmSyncobjCreate(fd(), 0, &done), 0);
  auto out = sync_point(done);
  EXPECT_EQ(submit(fd(), qc.queue, &o, 1, nullptr, 0, &out, 1), 0);
  EXPECT_EQ(drmSyncobjWait(fd(), &done, 1, INT64_MAX, DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, nullptr), 0);
  // MADV_DONTNEED drops the pages the registration pinned from the range.
  ASSERT_EQ(madvise(p, kPage, MADV_DONTNEED), 0);
  EXPECT_EQ(st->invalidations, before + 2);
  EXPECT_NE(bo_flags(fd(), keep) & DRM_EDU_ACCEL_BO_INFO_INVALIDATED, 0u);
  munmap(p, 4 * kPage);
  // The status mapping holds the file open (and so its BOs): let go of it.
  munmap(
      const_cast<uint8_t*>(reinterpret_cast<const volatile uint8_t*>(st)) - DRM_EDU_ACCEL_FILE_STATUS_OFFSET,
      kPage);
}

// The same memory registered for device writes by many files: each registration is its own
// DMA mapping, and the DMA API supports only so many overlapping device-writable mappings
// (DMA-API debugging WARNs at the 9th). The driver refuses the 9th with ETOOMANYREFS on every
// kernel; read-only registrations are not counted, and a closed one makes room again.
TEST_F(BoTest, WritableRegistrationsOfOnePageAreBounded) {
  constexpr int kMax = 8;
  Mapping m(3 * kPage, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(m.ok());
  memset(m.data(), 1, m.size());
  std::vector<std::unique_ptr<Fd>> files;
  for (int i = 0; i <= kMax + 1; ++i) {
    files.push_back(std::make_unique<Fd>(node_));
    ASSERT_GE(files.back()->get(), 0);
  }
  std::vector<uint32_t> h(files.size());
  for (int round = 0; round < 2; ++round) {  // the second round: every count was released
    for (int i = 0; i < kMax; ++i)
      ASSERT_EQ(bo_userptr(files[i]->get(), m.data() + 100, 2 * kPage, 0, &h[i]), 0) << "file " << i;
    EXPECT_EQ(bo_userptr(files[kMax]->get(), m.data() + 100, 2 * kPage, 0, &h[kMax]), ETOOMANYREFS);
    EXPECT_EQ(bo_userptr(files[kMax]->get(), m.data(), kPage, 0, &h[kMax]), ETOOMANYREFS)
        << "a registration starting on a shared page";
    ASSERT_EQ(
        bo_userptr(files[kMax]->get(), m.data(), 3 * kPage, DRM_EDU_ACCEL_BO_USERPTR_READONLY, &h[kMax]), 0);
    ASSERT_EQ(gem_close(files[0]->get(), h[0]), 0);
    // No job holds it: GEM_CLOSE frees the BO and its mapping at once.
    ASSERT_EQ(bo_userptr(files[kMax + 1]->get(), m.data() + 100, 2 * kPage, 0, &h[0]), 0);
    // The first registration of a page nobody else pinned is not counted (the driver's fast
    // path): the bound must hold when that one is the mapping that went.
    uint32_t extra = 0;
    EXPECT_EQ(bo_userptr(files[kMax]->get(), m.data() + 100, 2 * kPage, 0, &extra), ETOOMANYREFS)
        << "a ninth writable mapping once the first one was replaced";
    for (int i = 0; i <= kMax; ++i) gem_close(files[i]->get(), h[i]);
    gem_close(files[kMax + 1]->get(), h[0]);
  }
}

// With an IOMMU in lazy mode, the IOVA space of a released registration returns only when the
// flush queue drains; a 28-bit device has 256 MiB of it. Registering and releasing 64 MiB in a
// loop must not fail with ENOMEM in between (the driver waits for the queue).
TEST_F(BoTest, LargeRegistrationsInQuickSuccessionDoNotRunOutOfIova) {
  if (!iommu()) GTEST_SKIP() << "needs the IOMMU";
  Mapping m(64 * kMiB, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(m.ok());
  memset(m.data(), 1, m.size());
  for (int i = 0; i < 12; ++i) {
    uint32_t h = 0;
    ASSERT_EQ(bo_userptr(fd(), m.data(), m.size(), 0, &h), 0) << "registration " << i;
    ASSERT_EQ(gem_close(fd(), h), 0);
  }
}

TEST_F(BoTest, ZeroMemlockLimitMeansNoPinningAtAll) {
  const int a = fd();
  const int rc = as_unprivileged(0, [a] {
    Mapping m(kPage, PROT_READ | PROT_WRITE);
    uint32_t h = 0;
    return bo_userptr(a, m.data(), kPage, 0, &h) == EPERM ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}

// The documented errno: a zero limit is "not allowed" (-EPERM), not "too much" (-ENOMEM,
// which 2.x returned for BO_CREATE).
TEST_F(BoTest, ZeroMemlockLimitMeansNoBoCreateEither) {
  const int a = fd();
  const int rc = as_unprivileged(0, [a] {
    uint32_t h = 0;
    const int err = bo_create(a, kPage, &h);
    if (err != EPERM) std::fprintf(stderr, "BO_CREATE at a zero memlock limit: errno %d\n", err);
    return err == EPERM ? 0 : 1;
  });
  EXPECT_EQ(rc, 0);
}

// One error path per test: each names the call and the errno it must produce.
struct BadInput {
  const char* name;
  int expected_errno;
  int (*call)(int fd, int other_fd);
};

int bad_param_pad(int fd, int) {
  drm_edu_accel_get_param p{};
  p.param = DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS;
  p.pad = 1;
  return call(fd, DRM_IOCTL_EDU_ACCEL_GET_PARAM, p);
}
int bad_param_unknown(int fd, int) {
  uint64_t v;
  return get_param(fd, 0xdead, &v);
}
int bad_create_flags(int fd, int) {
  drm_edu_accel_bo_create a{};
  a.size = kPage;
  a.flags = 1;
  return call(fd, DRM_IOCTL_EDU_ACCEL_BO_CREATE, a);
}
int bad_create_zero(int fd, int) {
  uint32_t h;
  return bo_create(fd, 0, &h);
}
int bad_create_huge(int fd, int) {
  uint32_t h;
  return bo_create(fd, param(fd, DRM_EDU_ACCEL_PARAM_MAX_BO_SIZE) + 1, &h);
}
int bad_create_wrapping(int fd, int) {
  uint32_t h;
  return bo_create(fd, ~0ull - 100, &h);
}
int bad_userptr_flags(int fd, int) {
  static char buf[64];
  uint32_t h;
  return bo_userptr(fd, buf, sizeof buf, 0x80, &h);
}
int bad_userptr_zero(int fd, int) {
  static char buf[64];
  uint32_t h;
  return bo_userptr(fd, buf, 0, 0, &h);
}
int bad_userptr_wraps(int fd, int) {
  drm_edu_accel_bo_userptr a{};
  a.user_ptr = ~0ull - kPage;
  a.size = 2 * kPage;
  return call(fd, DRM_IOCTL_EDU_ACCEL_BO_USERPTR, a);
}
int bad_userptr_kernel_address(int fd, int) {
  drm_edu_accel_bo_userptr a{};
  a.user_ptr = 0xffff888000000000ull;
  a.size = kPage;
  return call(fd, DRM_IOCTL_EDU_ACCEL_BO_USERPTR, a);
}
int bad_userptr_unmapped(int fd, int) {
  void* p = mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(static_cast<char*>(p) + 2 * kPage, kPage);  // a hole in the middle
  uint32_t h;
  int err = bo_userptr(fd, p, 4 * kPage, 0, &h);
  munmap(p, 4 * kPage);
  return err;
}
int bad_userptr_readonly_memory_for_write(int fd, int) {
  Mapping m(2 * kPage, PROT_READ);
  uint32_t h;
  return bo_userptr(fd, m.data(), m.size(), 0, &h);
}
int bad_info_bogus_handle(int fd, int) {
  drm_edu_accel_bo_info info;
  return bo_info(fd, 0x7777, &info);
}
int bad_info_other_files_handle(int fd, int other) {
  uint32_t h = 0;
  if (bo_create(other, kPage, &h) != 0) return -1;
  // Make sure the number is not also a live handle of this file.
  drm_edu_accel_bo_info info;
  if (bo_info(fd, h, &info) == 0) return -2;
  return bo_info(fd, h, &info);
}
int bad_close_bogus_handle(int fd, int) { return gem_close(fd, 0x7777); }

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

class BadInputTest : public BoTest, public ::testing::WithParamInterface<BadInput> {};

TEST_P(BadInputTest, IsRefusedWithItsErrno) {
  Fd other(node_);
  ASSERT_GE(other.get(), 0);
  EXPECT_EQ(GetParam().call(fd(), other.get()), GetParam().expected_errno)
      << strerror(GetParam().expected_errno);
  EXPECT_EQ(param(fd(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES), 0u) << "a refused call left memory charged";
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadInputTest,
    ::testing::Values(BadInput{"GetParamNonZeroPad", EINVAL, bad_param_pad},
                      BadInput{"GetParamUnknown", EINVAL, bad_param_unknown},
                      BadInput{"CreateUnknownFlags", EINVAL, bad_create_flags},
                      BadInput{"CreateZeroSize", EINVAL, bad_create_zero},
                      BadInput{"CreateTooLarge", EINVAL, bad_create_huge},
                      BadInput{"CreateSizeNearU64Max", EINVAL, bad_create_wrapping},
                      BadInput{"UserptrUnknownFlags", EINVAL, bad_userptr_flags},
                      BadInput{"UserptrZeroLength", EINVAL, bad_userptr_zero},
                      BadInput{"UserptrAddressPlusLengthWraps", EINVAL, bad_userptr_wraps},
                      BadInput{"UserptrKernelAddress", EFAULT, bad_userptr_kernel_address},
                      BadInput{"UserptrUnmappedHole", EFAULT, bad_userptr_unmapped},
                      BadInput{"UserptrReadOnlyMemoryForWrite", EFAULT,
                               bad_userptr_readonly_memory_for_write},
                      BadInput{"InfoBogusHandle", ENOENT, bad_info_bogus_handle},
                      BadInput{"InfoAnotherFilesHandle", ENOENT, bad_info_other_files_handle},
                      BadInput{"CloseBogusHandle", EINVAL, bad_close_bogus_handle}),
    [](const auto& info) { return std::string(info.param.name); });

// Without an IOMMU and with RAM above edu's 28-bit mask, some pages are unreachable: the
// driver must refuse them with ERANGE (never hand the device a truncated address, never WARN).
TEST_F(BoTest, UnreachablePagesAreRefusedWithoutAnIommu) {
  if (iommu() || param(fd(), DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS) != 28 || !env_is("VM_MEM", "512M"))
    GTEST_SKIP() << "needs 512M of RAM, no IOMMU and the 28-bit mask (config highmem)";
  const size_t chunk = 16 * kMiB, total = 320 * kMiB;
  Mapping m(total, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(m.ok());
  std::memset(m.data(), 1, total);
  int refused = 0, accepted = 0;
  for (size_t off = 0; off < total; off += chunk) {
    uint32_t h = 0;
    const int err = bo_userptr(fd(), m.data() + off, chunk, 0, &h);
    auto pfn = pfns(m.data() + off, chunk);
    const bool reachable = std::all_of(pfn.begin(), pfn.end(), [](uint64_t p) { return p < (1u << 16); });
    if (err == 0) {
      ++accepted;
      EXPECT_TRUE(reachable) << "accepted a range with pages above 256 MiB at +" << off;
      gem_close(fd(), h);
    } else {
      ++refused;
      EXPECT_EQ(err, ERANGE) << "at +" << off;
    }
  }
  EXPECT_GT(refused, 0) << "320 MiB in a 512 MiB guest should reach above 256 MiB";
  EXPECT_GT(accepted, 0);
}

// BO_CREATE allocates where the device reaches, wherever the page allocator would have put
// the pages: no -ERANGE for driver-allocated memory, and queues (a CPU-only completion page)
// work on any machine.
TEST_F(BoTest, CreatedBosAreReachableWithoutAnIommu) {
  if (iommu() || param(fd(), DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS) != 28 || !env_is("VM_MEM", "512M"))
    GTEST_SKIP() << "needs 512M of RAM, no IOMMU and the 28-bit mask (config highmem)";
  // Fill the low memory first so the allocator hands out high pages.
  Mapping hog(200 * kMiB, PROT_READ | PROT_WRITE);
  ASSERT_TRUE(hog.ok());
  std::memset(hog.data(), 1, hog.size());
  std::vector<uint32_t> handles;
  // 6 MiB: within the driver's share of ZONE_DMA (max_zone_dma_kb, 8 MiB), where they may land.
  for (int i = 0; i < 6; ++i) {
    uint32_t h = 0;
    ASSERT_EQ(bo_create(fd(), kMiB, &h), 0) << "BO " << i;
    handles.push_back(h);
  }
  for (int i = 0; i < 4; ++i) {
    drm_edu_accel_queue_create q;
    ASSERT_EQ(queue_create(fd(), &q), 0);
  }
  for (auto h : handles) gem_close(fd(), h);
}

// ZONE_DMA's free pages, from /proc/zoneinfo.
uint64_t zone_dma_free_pages() {
  std::ifstream in("/proc/zoneinfo");
  bool in_dma = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Node ", 0) == 0)
      in_dma = line.find("zone      DMA") != std::string::npos && line.find("DMA32") == std::string::npos;
    const auto at = line.find("pages free");
    if (in_dma && at != std::string::npos) return std::stoull(line.substr(at + 10));
  }
  return 0;
}

// Without an IOMMU and with a mask narrower than RAM, BO_CREATE falls back to ZONE_DMA: 16 MiB
// for the whole machine, which other drivers need too. The driver's BOs hold at most
// max_zone_dma_kb of it (BO_CREATE fails with ENOMEM past it) instead of all of it.
TEST_F(BoTest, CreatedBosTakeABoundedShareOfZoneDma) {
  if (iommu() || param(fd(), DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS) > 24)
    GTEST_SKIP() << "needs a mask within ZONE_DMA and no IOMMU (config dma24)";
  std::ifstream pf("/sys/module/edu_accel/parameters/max_zone_dma_kb");
  uint64_t share_kb = 0;
  ASSERT_TRUE(pf >> share_kb);
  const uint64_t before = zone_dma_free_pages();
  uint64_t lowest = before;
  std::vector<uint32_t> handles;
  int err = 0;
  for (int i = 0; i < 24 && !err; ++i) {
    uint32_t h = 0;
    err = bo_create(fd(), kMiB, &h);
    if (!err) handles.push_back(h);
    lowest = std::min(lowest, zone_dma_free_pages());
  }
  const uint64_t taken_kb = (before - lowest) * kPage / 1024;
  std::printf("ZONE_DMA: %llu KiB free before, %llu KiB taken by %zu MiB of BOs (share %llu KiB), then %s\n",
              static_cast<unsigned long long>(before * kPage / 1024),
              static_cast<unsigned long long>(taken_kb), handles.size(),
              static_cast<unsigned long long>(share_kb), err ? strerror(err) : "no refusal");
  EXPECT_LE(taken_kb, share_kb + 1024) << "BO_CREATE took more of ZONE_DMA than the driver's share";
  EXPECT_EQ(err, ENOMEM)
      << "24 MiB of BOs fit without ZONE_DMA running out: the test did not reach the limit";
  for (auto h : handles) gem_close(fd(), h);
  // Given back: the share is usable again.
  uint32_t h = 0;
  ASSERT_EQ(bo_create(fd(), kMiB, &h), 0);
  gem_close(fd(), h);
}

uint64_t read_u64(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  in >> v;
  return v;
}

// Without an IOMMU a bounced mapping holds its swiotlb slots while the BO lives, and the pool
// (64 MiB, 2 KiB slots) is every device's: one device's BOs may hold max_bounce_pct of it, so
// that registering memory cannot deny other drivers' DMA. Before the bound, 1 MiB BOs were
// mapped until swiotlb itself ran out ("swiotlb buffer is full").
TEST_F(BoTest, BouncedMappingsTakeABoundedShareOfTheBouncePool) {
  if (iommu() || !bouncing()) GTEST_SKIP() << "needs bouncing mappings without an IOMMU (config bounce)";
  const std::string tlb = "/sys/kernel/debug/swiotlb/";
  const uint64_t slots = read_u64(tlb + "io_tlb_nslabs"), slot = 2048;
  const uint64_t pct = read_u64("/sys/module/edu_accel/parameters/max_bounce_pct");
  ASSERT_GT(slots, 0u) << tlb << " unreadable";
  const uint64_t used_before = read_u64(tlb + "io_tlb_used");
  std::vector<uint32_t> handles;
  int err = 0;
  for (uint64_t i = 0; i < slots * slot / kMiB + 8 && !err; ++i) {
    uint32_t h = 0;
    err = bo_create(fd(), kMiB, &h);
    if (!err) handles.push_back(h);
  }
  const uint64_t used = read_u64(tlb + "io_tlb_used");
  std::printf("swiotlb: %llu of %llu slots used before, %llu with %zu MiB of BOs (share %llu%%), then %s\n",
              static_cast<unsigned long long>(used_before), static_cast<unsigned long long>(slots),
              static_cast<unsigned long long>(used), handles.size(), static_cast<unsigned long long>(pct),
              err ? strerror(err) : "no refusal");
  EXPECT_EQ(err, ENOMEM) << "the whole pool's worth of BOs was mapped";
  EXPECT_LE((used - used_before) * slot, slots * slot * pct / 100) << "the device holds more than its share";
  EXPECT_GE((slots - used) * slot, slots * slot * (100 - pct) / 100 - 2 * kMiB)
      << "other devices' DMA is left less than the rest of the pool";
  for (auto h : handles) gem_close(fd(), h);
  EXPECT_EQ(read_u64(tlb + "io_tlb_used"), used_before) << "closed BOs kept their bounce slots";
  uint32_t h = 0;
  ASSERT_EQ(bo_create(fd(), kMiB, &h), 0) << "the share did not come back";
  gem_close(fd(), h);
}

// BO_CREATE takes blocks of up to 64 KiB: single pages come back from the allocator in falling
// physical order and never merge, which made a 1 MiB BO 256 SG entries and, without an IOMMU,
// 256 DMA segments (each boundary costs the engine a transfer more). The test VMs' memory is
// not fragmented enough to deny 64 KiB blocks: 16 entries when none was split, 32 allowed.
TEST_F(BoTest, CreatedBosAreBuiltFromLargeBlocks) {
  uint32_t h = 0;
  ASSERT_EQ(bo_create(fd(), kMiB, &h), 0);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(fd(), h, &info), 0);
  EXPECT_LE(info.sg_nents, 32u) << "a 1 MiB BO_CREATE is " << info.sg_nents << " SG entries";
  if (iommu()) {
    EXPECT_EQ(info.dma_nents, 1u);
  } else {
    EXPECT_EQ(info.dma_nents, info.sg_nents);
  }
  gem_close(fd(), h);
}

}  // namespace
