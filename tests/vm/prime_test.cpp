// In-VM suite for dma-buf sharing (PRIME) against vgem, a second real DRM driver: its
// buffers imported and DMA'd into, ours exported and read through it, implicit sync with its
// fences, one export used by both edu devices, refusals, and lifetimes past the exporter's
// handle and file. Runs as root (vgem's buffers come from its primary node).
#include <gtest/gtest.h>
#include <linux/dma-buf.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <xf86drm.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"
#include "vgem.hpp"

using namespace edu_test;

namespace {

constexpr uint64_t kPage = 4096;

std::vector<uint8_t> pattern(uint64_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Bytes that differ: a count says how much went wrong where a memcmp only says that it did.
uint64_t mismatches(const uint8_t* got, const uint8_t* want, uint64_t n) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) bad += got[i] != want[i];
  return bad;
}

// Whether this machine's edu can import at all: without an IOMMU and bounce buffers, a mask
// below the top of RAM makes the driver refuse every import (the mapping itself would fail).
bool imports_refused() {
  if (bouncing()) return false;
  std::error_code ec;
  if (std::filesystem::directory_iterator("/sys/kernel/iommu_groups", ec) !=
      std::filesystem::directory_iterator())
    return false;
  uint64_t mask_bits = 0;
  std::ifstream("/sys/module/edu_accel/parameters/dma_bits") >> mask_bits;
  if (mask_bits == 0 || mask_bits >= 64) return false;
  // The end of the highest "System RAM" range in /proc/iomem (root reads real addresses).
  std::ifstream in("/proc/iomem");
  uint64_t top = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == ' ' || line.find("System RAM") == std::string::npos) continue;
    top = std::max<uint64_t>(top, std::stoull(line.substr(line.find('-') + 1), nullptr, 16));
  }
  return top > (uint64_t{1} << mask_bits) - 1;
}

// One edu render node: a file, a queue and a syncobj, and copies that wait for their end.
class Edu {
 public:
  explicit Edu(const std::string& render) : fd_(render) {
    drm_edu_accel_queue_create q;
    EXPECT_EQ(queue_create(fd(), &q), 0);
    queue_ = q.queue;
    EXPECT_EQ(drmSyncobjCreate(fd(), 0, &done_), 0);
  }
  int fd() const { return fd_.get(); }

  // A driver-allocated BO, mapped.
  uint32_t create(uint64_t size, uint8_t** map) {
    uint32_t h = 0;
    uint64_t off = 0;
    EXPECT_EQ(bo_create(fd(), size, &h, &off), 0);
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd(), static_cast<off_t>(off));
    EXPECT_NE(m, MAP_FAILED);
    maps_.push_back({m, size});
    *map = static_cast<uint8_t*>(m);
    return h;
  }

  // Submits one H2H copy whose end signals the file's syncobj; 0 or errno.
  int copy_async(uint32_t src, uint32_t dst, uint64_t size) {
    auto o = op(DRM_EDU_ACCEL_OP_H2H, src, 0, dst, 0, size);
    auto out = sync_point(done_);
    return submit(fd(), queue_, &o, 1, nullptr, 0, &out, 1);
  }
  bool done(double seconds) {
    return drmSyncobjWait(fd(), &done_, 1, static_cast<int64_t>(abs_deadline_ns(seconds)),
                          DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, nullptr) == 0;
  }
  testing::AssertionResult copy(uint32_t src, uint32_t dst, uint64_t size) {
    if (int e = copy_async(src, dst, size)) return testing::AssertionFailure() << "SUBMIT: " << strerror(e);
    if (!done(600)) return testing::AssertionFailure() << "the copy never finished";
    return testing::AssertionSuccess();
  }
  ~Edu() {
    for (auto& [p, n] : maps_) munmap(p, n);
  }

 private:
  Fd fd_;
  uint32_t queue_ = 0, done_ = 0;
  std::vector<std::pair<void*, size_t>> maps_;
};

int export_fd(int fd, uint32_t handle, int* out, uint32_t flags = DRM_CLOEXEC | DRM_RDWR) {
  return drmPrimeHandleToFD(fd, handle, flags, out) == 0 ? 0 : errno;
}
int import_fd(int fd, int dmabuf, uint32_t* handle) {
  return drmPrimeFDToHandle(fd, dmabuf, handle) == 0 ? 0 : errno;
}

int bo_wait(int fd, uint32_t handle, double seconds, uint32_t flags = 0) {
  drm_edu_accel_bo_wait w{};
  w.handle = handle;
  w.flags = flags;
  w.timeout_ns = static_cast<int64_t>(abs_deadline_ns(seconds));
  return call(fd, DRM_IOCTL_EDU_ACCEL_BO_WAIT, w);
}

class PrimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = hostrt::detail::bound_edu_nodes();
    ASSERT_FALSE(nodes_.empty());
    vgem_ = std::make_unique<Vgem>();
    ASSERT_GE(vgem_->fd(), 0) << "no vgem device (the VM loads vgem)";
    edu_ = std::make_unique<Edu>(nodes_[0].render);
  }
  void TearDown() override {
    edu_.reset();
    vgem_.reset();
    // Every BO of the test went with its handles, files and dma-bufs.
    auto bos = hostrt::detail::read_text(nodes_[0].debugfs + "/bos");
    for (int i = 0; i < 300 && bos && bos->find("bo client=") != std::string::npos; ++i) {
      usleep(100000);
      bos = hostrt::detail::read_text(nodes_[0].debugfs + "/bos");
    }
    EXPECT_TRUE(bos && bos->find("bo client=") == std::string::npos) << *bos;
  }
  bool skip_if_refused() {
    if (!imports_refused()) return false;
    uint32_t h = 0;
    VgemBo v = vgem_->create(kPage);
    int buf = -1;
    EXPECT_EQ(export_fd(vgem_->fd(), v.handle, &buf), 0);
    EXPECT_EQ(import_fd(edu_->fd(), buf, &h), ERANGE) << "this machine's edu cannot reach all memory";
    close(buf);
    return true;
  }

  std::vector<hostrt::detail::EduNode> nodes_;
  std::unique_ptr<Vgem> vgem_;
  std::unique_ptr<Edu> edu_;
};

TEST_F(PrimeTest, AVgemBufferIsReadAndWrittenByTheDevice) {
  if (skip_if_refused()) GTEST_SKIP() << "imports refused here, as they must be";
  const uint64_t n = 64 * kPage;
  VgemBo v = vgem_->create(n);
  const auto theirs = pattern(n, 1), ours = pattern(n, 2);
  std::memcpy(v.map, theirs.data(), n);
  int buf = -1;
  ASSERT_EQ(export_fd(vgem_->fd(), v.handle, &buf), 0);
  uint32_t imp = 0;
  ASSERT_EQ(import_fd(edu_->fd(), buf, &imp), 0);
  close(buf);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(edu_->fd(), imp, &info), 0);
  EXPECT_EQ(info.flags, DRM_EDU_ACCEL_BO_INFO_IMPORTED);
  EXPECT_EQ(info.size, n);
  EXPECT_GE(info.dma_nents, 1u);

  uint8_t *dst = nullptr, *src = nullptr;
  const uint32_t hd = edu_->create(n, &dst), hs = edu_->create(n, &src);
  std::memcpy(src, ours.data(), n);
  ASSERT_TRUE(edu_->copy(imp, hd, n));
  EXPECT_EQ(mismatches(dst, theirs.data(), n), 0u) << "read from vgem's pages through the import";
  ASSERT_TRUE(edu_->copy(hs, imp, n));
  EXPECT_EQ(mismatches(v.map, ours.data(), n), 0u)
      << "written into vgem's pages, seen through vgem's mapping";
}

TEST_F(PrimeTest, AnExportedBoIsReadThroughItsDmaBufAndThroughVgem) {
  const uint64_t n = 16 * kPage;
  const auto want = pattern(n, 3);
  uint8_t *src = nullptr, *exp = nullptr;
  const uint32_t hs = edu_->create(n, &src), he = edu_->create(n, &exp);
  std::memcpy(src, want.data(), n);
  ASSERT_TRUE(edu_->copy(hs, he, n));  // the device writes what the importers read

  int buf = -1;
  ASSERT_EQ(export_fd(edu_->fd(), he, &buf), 0);
  void* m = mmap(nullptr, n, PROT_READ, MAP_SHARED, buf, 0);
  ASSERT_NE(m, MAP_FAILED) << strerror(errno);
  EXPECT_EQ(mismatches(static_cast<uint8_t*>(m), want.data(), n), 0u) << "through the dma-buf's mmap";
  munmap(m, n);
  EXPECT_EQ(mmap(nullptr, n, PROT_READ, MAP_PRIVATE, buf, 0), MAP_FAILED) << "a private mapping would copy";

  // vgem attaches and maps the pages for its own device; what it exports again is our buffer.
  uint32_t vh = 0;
  ASSERT_EQ(import_fd(vgem_->fd(), buf, &vh), 0);
  int again = -1;
  ASSERT_EQ(export_fd(vgem_->fd(), vh, &again), 0);
  struct stat a, b;
  ASSERT_EQ(fstat(buf, &a), 0);
  ASSERT_EQ(fstat(again, &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "vgem's export of our buffer is our dma-buf";
  m = mmap(nullptr, n, PROT_READ, MAP_SHARED, again, 0);
  ASSERT_NE(m, MAP_FAILED) << strerror(errno);
  EXPECT_EQ(mismatches(static_cast<uint8_t*>(m), want.data(), n), 0u);
  munmap(m, n);
  close(again);
  close(buf);
}

// The CPU-access bracket of a dma-buf (DMA_BUF_IOCTL_SYNC) waits for our job writing the
// buffer, and what it then reads through the dma-buf is the job's data: the job syncs its
// mappings for the CPU (under bouncing: copies the bounce slots back) before its fence signals.
// That is why the driver needs no begin/end_cpu_access of its own (driver.md says more).
TEST_F(PrimeTest, CpuAccessThroughTheDmaBufWaitsForTheDevicesWrite) {
  const uint64_t n = 16 * kPage;
  const auto want = pattern(n, 29);
  uint8_t *src = nullptr, *dst = nullptr;
  const uint32_t hs = edu_->create(n, &src), hd = edu_->create(n, &dst);
  std::memcpy(src, want.data(), n);
  int buf = -1;
  ASSERT_EQ(export_fd(edu_->fd(), hd, &buf), 0);
  void* m = mmap(nullptr, n, PROT_READ, MAP_SHARED, buf, 0);
  ASSERT_NE(m, MAP_FAILED) << strerror(errno);

  ASSERT_EQ(edu_->copy_async(hs, hd, n), 0);
  dma_buf_sync sync{};
  sync.flags = DMA_BUF_SYNC_START | DMA_BUF_SYNC_READ;
  ASSERT_EQ(ioctl(buf, DMA_BUF_IOCTL_SYNC, &sync), 0) << strerror(errno);
  EXPECT_TRUE(edu_->done(0)) << "DMA_BUF_SYNC_START returned while our job still wrote the buffer";
  EXPECT_EQ(mismatches(static_cast<uint8_t*>(m), want.data(), n), 0u) << "read after SYNC_START";
  sync.flags = DMA_BUF_SYNC_END | DMA_BUF_SYNC_READ;
  EXPECT_EQ(ioctl(buf, DMA_BUF_IOCTL_SYNC, &sync), 0);
  sync.flags = DMA_BUF_SYNC_START | 0x100;  // no such flag: the core refuses
  EXPECT_EQ(ioctl(buf, DMA_BUF_IOCTL_SYNC, &sync), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_TRUE(edu_->done(600));
  munmap(m, n);
  close(buf);
}

// vgem's fence on a shared buffer is another driver's pending work: our job must not touch the
// buffer until it signals, and our own job's fence must be on the buffers it writes.
TEST_F(PrimeTest, AJobWaitsForAnotherDriversFenceOnTheBuffer) {
  if (skip_if_refused()) GTEST_SKIP() << "imports refused here, as they must be";
  if (env_is("VM_ICOUNT", "off")) GTEST_SKIP() << "vgem's fences expire after 10 s of guest time";
  const uint64_t n = 8 * kPage;
  VgemBo v = vgem_->create(n);
  std::memset(v.map, 0x11, n);
  int buf = -1;
  ASSERT_EQ(export_fd(vgem_->fd(), v.handle, &buf), 0);
  uint32_t imp = 0;
  ASSERT_EQ(import_fd(edu_->fd(), buf, &imp), 0);
  close(buf);
  uint8_t* out = nullptr;
  const uint32_t hout = edu_->create(n, &out);
  int outbuf = -1;
  ASSERT_EQ(export_fd(edu_->fd(), hout, &outbuf), 0);  // shared: our job leaves its fence on it

  uint32_t fence = 0;
  ASSERT_EQ(vgem_->attach_fence(v.handle, true, &fence), 0);
  ASSERT_EQ(edu_->copy_async(imp, hout, n), 0);
  EXPECT_FALSE(edu_->done(1.0)) << "the job ran while vgem's writer was pending";
  EXPECT_EQ(bo_wait(edu_->fd(), imp, 0.2), ETIME);
  EXPECT_EQ(bo_wait(edu_->fd(), hout, 0.2), ETIME) << "our job's fence is not on the BO it writes";
  pollfd p{outbuf, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "the dma-buf reads as idle while our job is pending";

  std::memset(v.map, 0x22, n);  // the producer's work, finished before its fence signals
  ASSERT_EQ(vgem_->signal_fence(fence), 0);
  ASSERT_TRUE(edu_->done(600));
  EXPECT_EQ(bo_wait(edu_->fd(), hout, 600, DRM_EDU_ACCEL_BO_WAIT_READERS), 0);
  EXPECT_EQ(poll(&p, 1, 0), 1);
  const std::vector<uint8_t> want(n, 0x22);
  EXPECT_EQ(mismatches(out, want.data(), n), 0u) << "the job read the buffer before its producer finished";
  close(outbuf);
}

TEST_F(PrimeTest, OneExportIsUsedByBothDevicesThroughTheirOwnMappings) {
  if (nodes_.size() < 2) GTEST_SKIP() << "needs two edu devices";
  if (skip_if_refused()) GTEST_SKIP() << "imports refused here, as they must be";
  const uint64_t n = 32 * kPage;
  Edu other(nodes_[1].render);
  uint8_t *shared = nullptr, *back = nullptr, *src1 = nullptr;
  const uint32_t he = edu_->create(n, &shared), hb = edu_->create(n, &back);
  const auto first = pattern(n, 4), second = pattern(n, 5);
  std::memcpy(shared, first.data(), n);
  int buf = -1;
  ASSERT_EQ(export_fd(edu_->fd(), he, &buf), 0);
  uint32_t imp = 0;
  ASSERT_EQ(import_fd(other.fd(), buf, &imp), 0);
  close(buf);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(other.fd(), imp, &info), 0);
  EXPECT_EQ(info.flags, DRM_EDU_ACCEL_BO_INFO_IMPORTED) << "device 1 holds its own BO over the pages";

  // Device 1 writes the pages through its mapping, device 0 reads them through its own.
  const uint32_t h1 = other.create(n, &src1);
  std::memcpy(src1, second.data(), n);
  ASSERT_TRUE(other.copy(h1, imp, n));
  ASSERT_TRUE(edu_->copy(he, hb, n));
  EXPECT_EQ(mismatches(back, second.data(), n), 0u);
  EXPECT_EQ(mismatches(shared, second.data(), n), 0u);
  auto bos1 = hostrt::detail::read_text(nodes_[1].debugfs + "/bos");
  ASSERT_TRUE(bos1);
  EXPECT_NE(bos1->find(" import "), std::string::npos) << *bos1;
  EXPECT_NE(bos1->find("mapped=1"), std::string::npos) << *bos1;
}

TEST_F(PrimeTest, ImportingOurOwnExportGivesBackTheSameBo) {
  uint8_t* m = nullptr;
  const uint32_t h = edu_->create(kPage, &m);
  int buf = -1;
  ASSERT_EQ(export_fd(edu_->fd(), h, &buf), 0);
  uint32_t same = 0;
  ASSERT_EQ(import_fd(edu_->fd(), buf, &same), 0);
  EXPECT_EQ(same, h);
  Fd second(nodes_[0].render);
  uint32_t h2 = 0, h3 = 0;
  ASSERT_EQ(import_fd(second.get(), buf, &h2), 0);
  ASSERT_EQ(import_fd(second.get(), buf, &h3), 0);
  EXPECT_EQ(h2, h3);
  drm_edu_accel_bo_info info;
  ASSERT_EQ(bo_info(second.get(), h2, &info), 0);
  EXPECT_EQ(info.flags, 0u) << "the exported BO itself, not an import of it";
  auto bos = hostrt::detail::read_text(nodes_[0].debugfs + "/bos");
  ASSERT_TRUE(bos);
  EXPECT_EQ(bos->find(" import "), std::string::npos) << *bos;
  close(buf);
}

TEST_F(PrimeTest, BuffersThatMustNotBeSharedAreRefused) {
  int buf = -1;
  EXPECT_EQ(export_fd(edu_->fd(), 999, &buf), ENOENT);
  uint8_t* m = nullptr;
  const uint32_t h = edu_->create(kPage, &m);
  EXPECT_EQ(export_fd(edu_->fd(), h, &buf, 0x4000000), EINVAL) << "unknown flag";

  const size_t n = 4 * kPage;
  void* mem = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::memset(mem, 1, n);
  uint32_t ro = 0, rw = 0;
  const int err = bo_userptr(edu_->fd(), mem, n, DRM_EDU_ACCEL_BO_USERPTR_READONLY, &ro);
  if (err == ERANGE) {
    munmap(mem, n);
    GTEST_SKIP() << "process pages above this edu's DMA mask: no registration to export";
  }
  ASSERT_EQ(err, 0);
  EXPECT_EQ(export_fd(edu_->fd(), ro, &buf), EACCES) << "pinned without write: an importer could write";
  ASSERT_EQ(bo_userptr(edu_->fd(), mem, n, 0, &rw), 0);
  ASSERT_EQ(export_fd(edu_->fd(), rw, &buf), 0);
  EXPECT_EQ(mmap(nullptr, n, PROT_READ, MAP_SHARED, buf, 0), MAP_FAILED) << "process memory is not remapped";
  close(buf);
  uint32_t stale = 0;
  ASSERT_EQ(bo_userptr(edu_->fd(), mem, n, 0, &stale), 0);
  munmap(mem, n);  // the range's pages are no longer the registration's
  buf = -1;
  EXPECT_EQ(export_fd(edu_->fd(), stale, &buf), ESTALE);
  if (buf >= 0) close(buf);
}

TEST_F(PrimeTest, ImportsOfWhatIsNotADmaBufAreRefused) {
  uint32_t h = 0;
  EXPECT_EQ(import_fd(edu_->fd(), -1, &h), EBADF);
  Fd null("/dev/null");
  EXPECT_EQ(import_fd(edu_->fd(), null.get(), &h), EINVAL);
  EXPECT_EQ(import_fd(edu_->fd(), edu_->fd(), &h), EINVAL) << "a DRM file is not a dma-buf";
  skip_if_refused();
}

// The exporter's handle and file may go first: the dma-buf holds the pages, and an import
// holds the dma-buf after the exporter's handles, fds and file are gone.
TEST_F(PrimeTest, SharedBuffersOutliveTheirExportersHandlesAndFiles) {
  const uint64_t n = 8 * kPage;
  const auto want = pattern(n, 6);
  int buf = -1;
  {
    Edu exporter(nodes_[0].render);
    uint8_t* m = nullptr;
    const uint32_t h = exporter.create(n, &m);
    std::memcpy(m, want.data(), n);
    ASSERT_EQ(export_fd(exporter.fd(), h, &buf), 0);
    EXPECT_EQ(gem_close(exporter.fd(), h), 0);
  }
  void* m = mmap(nullptr, n, PROT_READ, MAP_SHARED, buf, 0);
  ASSERT_NE(m, MAP_FAILED) << strerror(errno);
  EXPECT_EQ(mismatches(static_cast<uint8_t*>(m), want.data(), n), 0u);
  munmap(m, n);
  close(buf);

  if (imports_refused()) return;
  VgemBo v = vgem_->create(n);
  std::memcpy(v.map, want.data(), n);
  ASSERT_EQ(export_fd(vgem_->fd(), v.handle, &buf), 0);
  uint32_t imp = 0;
  ASSERT_EQ(import_fd(edu_->fd(), buf, &imp), 0);
  close(buf);
  vgem_.reset();  // vgem's handle, mapping and file
  uint8_t* out = nullptr;
  const uint32_t hout = edu_->create(n, &out);
  ASSERT_TRUE(edu_->copy(imp, hout, n));
  EXPECT_EQ(mismatches(out, want.data(), n), 0u);
}

}  // namespace
