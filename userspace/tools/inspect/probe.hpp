// edu-inspect's readers of what the kernel shows about a buffer: /proc/self/pagemap (where
// its pages sit), the driver's debugfs `bos` and `pins` (its SG table and DMA segments), the
// pin counters, tracefs (the transfers of a copy) and the kernel log (a refusal's line).
// All of it needs root, as in the test VM; each reader says so instead of guessing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace inspect {

// A range of physical (or bus) addresses.
struct Range {
  std::uint64_t addr = 0;
  std::uint64_t len = 0;
  std::uint64_t end() const { return addr + len; }
  bool operator==(const Range&) const = default;
};

// Consecutive virtual pages backed by consecutive page frames.
struct PfnRun {
  std::uint64_t virt = 0;
  std::uint64_t phys = 0;  // 0 when the page is not present (or PFNs are hidden: not root)
  std::uint64_t len = 0;
};

// [p, p+bytes) page by page from /proc/self/pagemap, merged into runs. Empty on error.
std::vector<PfnRun> pfn_runs(const void* p, std::size_t bytes);
// The physical address of the byte at p, or nullopt when its page is not present.
std::optional<std::uint64_t> phys_of(const std::vector<PfnRun>& runs, std::uint64_t virt);

// One BO as debugfs `bos` prints it.
struct BoLayout {
  std::string header;  // the "bo client=..." line, verbatim
  std::uint64_t user = 0;
  std::uint32_t offset = 0;  // of the user address in its first page
  std::uint32_t sg_nents = 0, dma_nents = 0;
  bool mapped = false;
  std::vector<Range> sg, dma;
};

// The client id the driver gave this process's newest open file (debugfs `pins`), or 0.
std::uint64_t own_client(const std::string& debugfs_dir);
// The BO of `client` whose handle list holds `handle`, or nullopt.
std::optional<BoLayout> find_bo(const std::string& debugfs_dir, std::uint64_t client, std::uint32_t handle);

// One line of /sys/kernel/debug/dma-api/dump: a mapping as the DMA API recorded it when the
// driver made it (CONFIG_DMA_API_DEBUG), not as the driver remembers it.
struct DmaApiEntry {
  std::string type;  // "scather-gather" (the kernel's spelling), "single", "coherent", ...
  std::string direction;
  std::uint64_t phys = 0, pfn = 0, dma = 0, len = 0;
  std::uint64_t end() const { return dma + len; }
};
// The dump's entries for the device dev_name names ("0000:01:00.0"), sorted by DMA address;
// nullopt when the kernel keeps no such record (no CONFIG_DMA_API_DEBUG, or not root).
std::optional<std::vector<DmaApiEntry>> dma_api_entries(const std::string& dev_name);
// The PCI name of the device behind a DRM node (/dev/dri/renderD129 -> "0000:01:00.0"), or "".
std::string pci_name_of(const std::string& node);

// Counters that show pinning: the process's VmPin (kB) and the system's FOLL_PIN totals.
struct PinCounters {
  long vmpin_kb = -1;
  long long acquired = -1, released = -1;
};
PinCounters pin_counters();

// One edu DMA transfer as the edu_xfer_start tracepoint records it.
struct Xfer {
  bool to_ram = false;
  std::uint64_t ram = 0;  // the address edu was given (bus address / IOVA)
  std::uint32_t len = 0;
  std::uint64_t seqno = 0;
  std::uint32_t queue = 0;
};
struct JobEvents {
  std::string finished_fence, hw_fence;  // "context:seqno"
  int error = 0;
  bool done = false;
};

// A private tracefs instance (instances/edu-inspect-PID) with edu_accel's transfer and job
// events on, so a user's own tracing in the global buffer is left alone. ok() is false when
// tracefs is not there or not writable (not root).
class TraceSession {
 public:
  TraceSession();
  ~TraceSession();
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;
  bool ok() const { return ok_; }
  // This client's transfers and the job's fences for (queue, seqno).
  std::vector<Xfer> xfers(std::uint64_t client, std::uint32_t queue, std::uint64_t seqno) const;
  JobEvents job(std::uint64_t client, std::uint32_t queue, std::uint64_t seqno) const;

 private:
  std::string dir_;
  bool ok_ = false;
};

// The newest kernel log line containing `needle` (syslog read; root), or "".
std::string last_kernel_line(const std::string& needle);
// Whether the kernel command line holds `word`.
bool cmdline_has(const std::string& word);

}  // namespace inspect
