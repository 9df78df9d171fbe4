#include "inspect/probe.hpp"

#include <fcntl.h>
#include <sys/klog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "detail/sysfs.hpp"

namespace inspect {

namespace {

constexpr std::uint64_t kPage = 4096;
const char* const kTracefs = "/sys/kernel/tracing";

bool write_file(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  f << value;
  f.flush();
  return static_cast<bool>(f);
}

// The unsigned number after "key=" in a line (hex with 0x), or nullopt.
std::optional<std::uint64_t> num(const std::string& line, const std::string& key) {
  const auto at = line.find(" " + key + "=");
  if (at == std::string::npos) return std::nullopt;
  return std::strtoull(line.c_str() + at + key.size() + 2, nullptr, 0);
}

std::string word(const std::string& line, const std::string& key) {
  const auto at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const auto start = at + key.size() + 2;
  return line.substr(start, line.find(' ', start) - start);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool has_handle(const std::string& header, std::uint32_t handle) {
  std::istringstream list(word(header, "handle"));
  for (std::string h; std::getline(list, h, ',');)
    if (h == std::to_string(handle)) return true;
  return false;
}

}  // namespace

std::vector<PfnRun> pfn_runs(const void* p, std::size_t bytes) {
  std::vector<PfnRun> runs;
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return runs;
  const auto first = reinterpret_cast<std::uintptr_t>(p) / kPage;
  const auto last = (reinterpret_cast<std::uintptr_t>(p) + bytes - 1) / kPage;
  for (auto vpn = first; vpn <= last; ++vpn) {
    std::uint64_t entry = 0;
    if (pread(fd, &entry, sizeof entry, static_cast<off_t>(vpn * sizeof entry)) != sizeof entry) break;
    // Bit 63: present; bits 0-54: the page frame number (0 for an unprivileged reader).
    const std::uint64_t pfn = (entry >> 63) ? entry & ((std::uint64_t{1} << 55) - 1) : 0;
    const std::uint64_t phys = pfn * kPage;
    if (!runs.empty() && phys && runs.back().phys && runs.back().phys + runs.back().len == phys)
      runs.back().len += kPage;
    else
      runs.push_back({vpn * kPage, phys, kPage});
  }
  close(fd);
  return runs;
}

std::optional<std::uint64_t> phys_of(const std::vector<PfnRun>& runs, std::uint64_t virt) {
  for (const auto& r : runs)
    if (virt >= r.virt && virt < r.virt + r.len)
      return r.phys ? std::optional(r.phys + (virt - r.virt)) : std::nullopt;
  return std::nullopt;
}

std::uint64_t own_client(const std::string& debugfs_dir) {
  const auto text = hostrt::detail::read_text(debugfs_dir + "/pins");
  std::uint64_t client = 0;
  if (!text) return 0;
  // "client tgid command pinned_bytes"; the newest file of this process has the largest id.
  for (const auto& l : lines(*text)) {
    unsigned long long id = 0;
    int tgid = 0;
    if (std::sscanf(l.c_str(), "%llu %d", &id, &tgid) == 2 && tgid == getpid() && id > client) client = id;
  }
  return client;
}

std::optional<BoLayout> find_bo(const std::string& debugfs_dir, std::uint64_t client, std::uint32_t handle) {
  const auto text = hostrt::detail::read_text(debugfs_dir + "/bos");
  if (!text) return std::nullopt;
  std::optional<BoLayout> bo;
  bool in_ours = false;
  for (const auto& l : lines(*text)) {
    if (l.rfind("bo ", 0) == 0) {
      if (bo) break;
      in_ours = num(l, "client") == client && has_handle(l, handle);
      if (!in_ours) continue;
      bo.emplace();
      bo->header = l;
      bo->user = num(l, "user").value_or(0);
      bo->offset = static_cast<std::uint32_t>(num(l, "offset").value_or(0));
      bo->sg_nents = static_cast<std::uint32_t>(num(l, "sg_nents").value_or(0));
      bo->dma_nents = static_cast<std::uint32_t>(num(l, "dma_nents").value_or(0));
      bo->mapped = num(l, "mapped").value_or(0) != 0;
    } else if (in_ours && l.rfind("  sg ", 0) == 0) {
      bo->sg.push_back({num(l, "phys").value_or(0), num(l, "len").value_or(0)});
    } else if (in_ours && l.rfind("  dma ", 0) == 0) {
      bo->dma.push_back({num(l, "addr").value_or(0), num(l, "len").value_or(0)});
    }
  }
  return bo;
}

std::optional<std::vector<DmaApiEntry>> dma_api_entries(const std::string& dev_name) {
  // kernel/dma/debug.c, dump_show(): "%s %s %s idx %d P=%llx N=%lx D=%llx L=%llx %s %s", the
  // device, its driver, the type, the hash bucket (not an SG index), physical address, page
  // frame, DMA address, size, direction and whether the driver checked for a mapping error.
  const auto text = hostrt::detail::read_text("/sys/kernel/debug/dma-api/dump");
  if (!text) return std::nullopt;
  std::vector<DmaApiEntry> out;
  for (const auto& l : lines(*text)) {
    char dev[64], driver[64], type[32], dir[32];
    unsigned long long p = 0, n = 0, d = 0, len = 0;
    if (std::sscanf(l.c_str(), "%63s %63s %31s idx %*d P=%llx N=%llx D=%llx L=%llx %31s", dev, driver, type,
                    &p, &n, &d, &len, dir) != 8 ||
        dev_name != dev)
      continue;
    out.push_back({type, dir, p, n, d, len});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.dma < b.dma; });
  return out;
}

std::string pci_name_of(const std::string& node) {
  const std::string link = "/sys/class/drm/" + node.substr(node.rfind('/') + 1) + "/device";
  char target[512];
  const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0) return "";
  target[n] = '\0';
  const std::string t = target;
  return t.substr(t.rfind('/') + 1);
}

PinCounters pin_counters() {
  PinCounters c;
  // vmstat keeps per-CPU deltas until folded: without this the counters lag.
  write_file("/proc/sys/vm/stat_refresh", "1");
  if (const auto status = hostrt::detail::read_text("/proc/self/status"))
    for (const auto& l : lines(*status)) std::sscanf(l.c_str(), "VmPin: %ld", &c.vmpin_kb);
  if (const auto vmstat = hostrt::detail::read_text("/proc/vmstat")) {
    for (const auto& l : lines(*vmstat)) {
      long long v = 0;
      if (std::sscanf(l.c_str(), "nr_foll_pin_acquired %lld", &v) == 1) c.acquired = v;
      if (std::sscanf(l.c_str(), "nr_foll_pin_released %lld", &v) == 1) c.released = v;
    }
  }
  return c;
}

TraceSession::TraceSession()
    : dir_(std::string(kTracefs) + "/instances/edu-inspect-" + std::to_string(getpid())) {
  if (mkdir(dir_.c_str(), 0700) != 0) return;
  write_file(dir_ + "/buffer_size_kb", "4096");
  ok_ = true;
  for (const char* ev : {"edu_xfer_start", "edu_job_queued", "edu_job_done"})
    ok_ = write_file(dir_ + "/events/edu_accel/" + ev + "/enable", "1") && ok_;
}

TraceSession::~TraceSession() {
  if (dir_.empty()) return;
  write_file(dir_ + "/events/enable", "0");
  rmdir(dir_.c_str());
}

std::vector<Xfer> TraceSession::xfers(std::uint64_t client, std::uint32_t queue, std::uint64_t seqno) const {
  std::vector<Xfer> out;
  const auto text = hostrt::detail::read_text(dir_ + "/trace");
  if (!text) return out;
  for (const auto& l : lines(*text)) {
    if (l.find("edu_xfer_start:") == std::string::npos || num(l, "client") != client ||
        num(l, "queue") != queue || num(l, "seqno") != seqno)
      continue;
    Xfer x;
    x.to_ram = l.find(" dev->ram ") != std::string::npos;
    x.ram = num(l, "ram").value_or(0);
    x.len = static_cast<std::uint32_t>(num(l, "len").value_or(0));
    x.queue = queue;
    x.seqno = seqno;
    out.push_back(x);
  }
  return out;
}

JobEvents TraceSession::job(std::uint64_t client, std::uint32_t queue, std::uint64_t seqno) const {
  JobEvents j;
  const auto text = hostrt::detail::read_text(dir_ + "/trace");
  if (!text) return j;
  for (const auto& l : lines(*text)) {
    if (num(l, "client") != client || num(l, "queue") != queue || num(l, "seqno") != seqno) continue;
    if (l.find("edu_job_queued:") != std::string::npos) j.finished_fence = word(l, "finished_fence");
    if (l.find("edu_job_done:") != std::string::npos) {
      j.hw_fence = word(l, "hw_fence");
      j.error = std::atoi(word(l, "error").c_str());
      j.done = true;
    }
  }
  return j;
}

std::string last_kernel_line(const std::string& needle) {
  const int len = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, nullptr, 0);
  if (len <= 0) return "";
  std::string buf(static_cast<std::size_t>(len), '\0');
  const int n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf.data(), len);
  if (n <= 0) return "";
  buf.resize(static_cast<std::size_t>(n));
  std::string found;
  for (const auto& l : lines(buf))
    if (l.find(needle) != std::string::npos) found = l;
  return found;
}

bool cmdline_has(const std::string& w) {
  const auto text = hostrt::detail::read_text("/proc/cmdline");
  return text && (" " + *text + " ").find(" " + w) != std::string::npos;
}

}  // namespace inspect
