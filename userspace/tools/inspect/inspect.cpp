#include "inspect/inspect.hpp"

#include <sys/mman.h>
#include <xf86drm.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/drm_backend.hpp"
#include "detail/sysfs.hpp"
#include "detail/uapi_edu_accel.hpp"

namespace inspect {

namespace {

constexpr std::uint64_t kPage = 4096;

const char* errname(int e) {
  const char* n = strerrorname_np(e);
  return n ? n : "?";
}

}  // namespace

Inspector::Inspector(const Options& o) : o_(o), dev_(hostrt::Device::open(o.device)) {
  fd_ = dynamic_cast<hostrt::detail::DrmBackend&>(hostrt::detail::Access::core(dev_)->backend("edu-inspect"))
            .fd();
  const auto node = dev_.node();
  debugfs_ = "/sys/kernel/debug/dri/" + node.substr(node.rfind("renderD") + 7);
  client_ = own_client(debugfs_);
  pci_ = pci_name_of(node);
  mask_bits_ = dev_.capabilities().dma_mask_bits;
  iommu_ = dev_.capabilities().iommu;
  bounce_ = cmdline_has("swiotlb=force");
}

Inspector::~Inspector() {
  reg_.reset();
  for (void* m : maps_) munmap(m, o_.size);
}

void Inspector::check(bool ok, const std::string& what) {
  if (!o_.check) return;
  ++checks_;
  if (!ok) ++failed_;
  std::printf("  CHECK %s: %s\n", ok ? "ok  " : "FAIL", what.c_str());
}

int Inspector::report_checks() const {
  if (!o_.check) return 0;
  std::printf("\nchecks: %d passed, %d failed\n", checks_ - failed_, failed_);
  return failed_ ? 1 : 0;
}

void Inspector::header() {
  const auto& c = dev_.capabilities();
  const char* config = std::getenv("VM_CONFIG");
  std::printf("== edu-inspect: device %zu, %s ==\n", o_.device, dev_.node().c_str());
  char reach[64] = "all of memory";
  if (c.dma_mask_bits < 64)
    std::snprintf(reach, sizeof reach, "below 0x%" PRIx64, std::uint64_t{1} << c.dma_mask_bits);
  std::printf("DMA mask %u bits (edu reaches %s), IOMMU %s, max DMA segment %s%s%s%s\n", c.dma_mask_bits,
              reach, iommu_ ? "yes" : "no", human(c.max_segment_size).c_str(),
              bounce_ ? ", swiotlb=force" : "", config ? ", VM config " : "", config ? config : "");
  std::printf("this process is client %" PRIu64 " in debugfs (%s)\n", client_, debugfs_.c_str());
  start_ = pin_counters();
}

void Inspector::show_pins(const PinCounters& before, const char* what) {
  const PinCounters now = pin_counters();
  std::printf(
      "  Pins: VmPin %ld kB (pages this process holds pinned, /proc/self/status);\n"
      "  nr_foll_pin_acquired %+lld, nr_foll_pin_released %+lld since %s (/proc/vmstat, pages)\n",
      now.vmpin_kb, now.acquired - before.acquired, now.released - before.released, what);
}

void Inspector::describe(Buffer& b) {
  b.pfns = pfn_runs(reinterpret_cast<void*>(b.virt), b.size);
  if (auto bo = find_bo(debugfs_, client_, b.handle)) b.bo = *bo;
  drm_edu_accel_bo_info info{};
  info.handle = b.handle;
  if (drmIoctl(fd_, DRM_IOCTL_EDU_ACCEL_BO_INFO, &info) == 0)
    b.info = {true, info.flags, info.sg_nents, info.dma_nents, info.size};
  if (const auto all = dma_api_entries(pci_); all && !b.bo.header.empty())
    b.dma_api = dma_api_view(b, pci_, *all);
  print_layout(b, o_.full);
}

void Inspector::check_layout(const Buffer& b) {
  std::vector<Range> sg = merged(b.bo.sg);
  check(!b.bo.header.empty() && pfn_ranges(b) == sg,
        b.name + ": pagemap's PFN runs and the driver's SG entries cover the same frames in the same order");
  check(b.info.ok && b.info.sg_nents == b.bo.sg.size() && b.info.dma_nents == b.bo.dma.size(),
        b.name + ": BO_INFO's sg_nents/dma_nents match debugfs");
  std::uint64_t sg_bytes = 0, dma_bytes = 0;
  for (const auto& r : b.bo.sg) sg_bytes += r.len;
  for (const auto& r : b.bo.dma) dma_bytes += r.len;
  check(dma_bytes == sg_bytes && sg_bytes >= b.size,
        b.name + ": the DMA segments cover every byte of the SG table");
  check(mask_bits_ >= 64 || b.dma_end() <= (std::uint64_t{1} << mask_bits_),
        b.name + ": every DMA address is below the device's mask");
  if (iommu_)
    check(b.bo.dma.size() == 1, b.name + ": with an IOMMU the BO is one IOVA range (one DMA segment)");
  else if (bounce_)
    check(!b.dma_equals_phys() && b.max_dma_segment() <= dev_.capabilities().max_segment_size,
          b.name + ": swiotlb=force: DMA addresses are bounce slots, not the pages, each <= the max segment");
  else
    check(b.dma_equals_phys(),
          b.name + ": no IOMMU: each DMA address is the physical address of its SG entry");
  if (b.dma_api) {
    const auto a = dma_api_agreement(b);
    check(a.covered, b.name + ": the DMA API's dump has every DMA segment, at the same address and size");
    check(a.phys,
          b.name + ": the dump's physical address of each mapping is its SG entry's, a frame pagemap shows");
  }
}

static void summary(const Buffer& b) {
  std::printf("SUMMARY %s size=%" PRIu64 " pfn_runs=%zu sg=%zu dma=%zu dma_end=0x%" PRIx64
              " max_dma_seg=%" PRIu64 " dma_equals_phys=%s\n",
              b.name.c_str(), b.size, b.pfns.size(), b.bo.sg.size(), b.bo.dma.size(), b.dma_end(),
              b.max_dma_segment(), b.dma_equals_phys() ? "yes" : "no");
  if (b.dma_api) {
    const auto a = dma_api_agreement(b);
    std::printf("SUMMARY dma_api_%s entries=%zu bytes=%" PRIu64 " covered=%s phys=%s others=%zu\n",
                b.name.c_str(), b.dma_api->entries.size(), a.bytes, a.covered ? "yes" : "no",
                a.phys ? "yes" : "no", b.dma_api->others);
  }
}

void* Inspector::map_user_memory() {
  void* p = mmap(nullptr, o_.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw hostrt::OutOfMemory(errno, "mmap of the user memory");
  maps_.push_back(p);
  // Touch every page: pagemap shows only pages that exist, and registration would fault them in.
  std::memset(p, 0x5a, o_.size);
  return p;
}

void Inspector::make_userptr() {
  std::printf(
      "\n-- user memory: %s of mmap'd anonymous memory registered with BO_USERPTR "
      "(cudaHostRegister) --\n",
      human(o_.size).c_str());
  const bool limited = !iommu_ && mask_bits_ < 64;
  const std::uint64_t limit = limited ? std::uint64_t{1} << mask_bits_ : 0;
  auto above = [&](void* p) {
    for (const auto& r : pfn_runs(p, o_.size))
      if (r.phys + r.len > limit) return true;
    return false;
  };
  user_ = map_user_memory();
  int tries = 1;
  // The page allocator decides where the pages land: hold on to low memory until it hands
  // out a page edu cannot reach (256 tries of 1 MiB fill a 256 MiB low zone).
  while (o_.above_mask && limited && !above(user_) && tries < 300) {
    user_ = map_user_memory();
    ++tries;
  }
  if (o_.above_mask && limited)
    std::printf("  (--above-mask: took %d mapping(s) of %s to get a page above the mask)\n", tries,
                human(o_.size).c_str());
  ub_ = {"userptr", reinterpret_cast<std::uint64_t>(user_), o_.size, 0, limit, {}, {}, {}, {}};
  const PinCounters before = pin_counters();
  try {
    reg_ = dev_.host_register(user_, o_.size);
  } catch (const hostrt::Error& e) {
    const int err = e.error_code();
    ub_.pfns = pfn_runs(user_, o_.size);
    print_layout(ub_, o_.full);
    const std::string line = last_kernel_line("refusing a buffer");
    std::printf("  REFUSED: BO_USERPTR failed with %s (hostrt: \"%s\")\n", errname(err), e.what());
    std::printf("  kernel log: %s\n", line.empty() ? "(no line)" : line.c_str());
    std::printf(
        "  Why: without an IOMMU edu is given physical addresses and silently truncates those\n"
        "  above its mask, so the driver refuses the buffer before mapping it.\n");
    std::printf("SUMMARY refusal errno=%s dmesg=%s above_mask=%s\n", errname(err),
                line.empty() ? "no" : "yes", limited && above(user_) ? "yes" : "no");
    check(err == ERANGE && limited && above(user_) && !line.empty(),
          "userptr: a range with a page above the mask is refused with ERANGE and one kernel log line");
    return;
  }
  ub_.handle = reg_.handle();
  describe(ub_);
  show_pins(before, "before the registration");
  const PinCounters now = pin_counters();
  check(now.acquired - before.acquired >= static_cast<long long>(o_.size / kPage) &&
            now.vmpin_kb >= static_cast<long>(o_.size / 1024),
        "userptr: registering pinned every page (FOLL_PIN count and VmPin grew by its size)");
  check_layout(ub_);
  summary(ub_);
}

void Inspector::make_bo() {
  std::printf("\n-- driver BO: %s from BO_CREATE, mmap'd (cudaHostAlloc) --\n", human(o_.size).c_str());
  const PinCounters before = pin_counters();
  alloc_ = dev_.host_alloc(o_.size);
  std::memset(alloc_.data(), 0, alloc_.size());  // maps every page, for pagemap
  bb_ = {"bo", reinterpret_cast<std::uint64_t>(alloc_.data()), alloc_.size(), alloc_.handle(), 0, {}, {}, {},
         {}};
  if (!iommu_ && mask_bits_ < 64) bb_.limit = std::uint64_t{1} << mask_bits_;
  describe(bb_);
  show_pins(before, "before BO_CREATE (the driver allocates these pages: no FOLL_PIN)");
  check_layout(bb_);
  summary(bb_);
}

void Inspector::run() {
  header();
  if (o_.userptr) make_userptr();
  if (o_.bo) make_bo();
  if (o_.copy) {
    if (reg_ && alloc_)
      copy();
    else
      std::printf("\n-- copy: skipped (it needs both the registered user memory and the BO) --\n");
  }
  if (o_.pool) pool_demo();
}

}  // namespace inspect
