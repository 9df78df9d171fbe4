// hostrt-smi: what the runtime sees of each device (capabilities through GET_PARAM), the
// processes using it (their files' fdinfo, as nvidia-smi lists processes: an unprivileged
// user sees their own) and, for root, the driver's debugfs state: engine, queues and jobs,
// pinned memory per client.
//
// usage: hostrt-smi [--backend drm|emulated] [--no-debugfs]
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"
#include "hostrt/hostrt.hpp"

namespace {

std::string bytes(std::uint64_t n) {
  char buf[64];
  if (n >= (1u << 20) && n % (1u << 20) == 0)
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>(n >> 20));
  else if (n >= 1024 && n % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>(n >> 10));
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

// Prints a debugfs file of the device, indented, when it can be read (root, debugfs mounted).
void show_debugfs(const std::string& node, const char* file) {
  const auto minor = node.rfind("renderD");
  if (minor == std::string::npos) return;
  const std::string path = "/sys/kernel/debug/dri/" + node.substr(minor + 7) + "/" + file;
  const auto text = hostrt::detail::read_text(path);
  if (!text) {
    std::printf("    %s: not readable (%s)\n", file, path.c_str());
    return;
  }
  std::printf("    -- %s --\n", file);
  std::size_t start = 0;
  while (start < text->size()) {
    std::size_t end = text->find('\n', start);
    if (end == std::string::npos) end = text->size();
    std::printf("      %s\n", text->substr(start, end - start).c_str());
    start = end + 1;
  }
}

// The PCI function behind a render node (/dev/dri/renderD128 -> 0000:00:02.0), "" if unknown.
std::string pci_name(const std::string& node) {
  std::error_code ec;
  const auto name = std::filesystem::path(node).filename().string();
  const auto dev = std::filesystem::canonical("/sys/class/drm/" + name + "/device", ec);
  return ec ? std::string() : dev.filename().string();
}

// One open file of the device in some process, from /proc/<pid>/fdinfo/<fd> (drm-usage-stats).
struct FileUse {
  std::string pid, command, client, engine, memory, transfers;
};

std::map<std::string, std::string> read_fdinfo(const std::filesystem::path& path) {
  std::map<std::string, std::string> keys;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto value = line.find_first_not_of(" \t", colon + 1);
    keys[line.substr(0, colon)] = value == std::string::npos ? "" : line.substr(value);
  }
  return keys;
}

// Every file of the driver on `pci` that this user may see, one row per client (dup'ed and
// inherited descriptors of one file share its client id).
std::vector<FileUse> users_of(const std::string& pci) {
  std::vector<FileUse> out;
  std::set<std::string> seen;
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fdinfo", fec)) {
      auto keys = read_fdinfo(fd.path());
      if (keys["drm-driver"] != "edu_accel" || keys["drm-pdev"] != pci) continue;
      if (!seen.insert(keys["drm-client-id"]).second) continue;
      std::string command;
      std::ifstream(proc.path() / "comm") >> command;
      out.push_back({pid, command, keys["drm-client-id"], keys["drm-engine-dma"], keys["drm-memory-system"],
                     keys["edu_accel-transfers"]});
    }
  }
  return out;
}

void show_users(const std::string& node) {
  const std::string pci = pci_name(node);
  if (pci.empty()) return;
  const auto users = users_of(pci);
  std::printf("    processes (fdinfo of %s): %zu file(s)\n", pci.c_str(), users.size());
  std::printf("      %8s  %-16s %7s  %20s  %10s  %12s\n", "pid", "command", "client", "engine time",
              "transfers", "pinned");
  const std::string self = std::to_string(getpid());
  for (const auto& u : users)
    std::printf("      %8s  %-16s %7s  %20s  %10s  %12s%s\n", u.pid.c_str(), u.command.c_str(),
                u.client.c_str(), u.engine.c_str(), u.transfers.c_str(), u.memory.c_str(),
                u.pid == self ? "  (this process)" : "");
}

void usage() { std::fprintf(stderr, "usage: hostrt-smi [--backend drm|emulated] [--no-debugfs]\n"); }

}  // namespace

int main(int argc, char** argv) {
  hostrt::Backend backend = hostrt::Backend::Drm;
  bool debugfs = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) {
      const char* b = argv[++i];
      if (!std::strcmp(b, "emulated")) {
        backend = hostrt::Backend::Emulated;
      } else if (std::strcmp(b, "drm") != 0) {
        usage();
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--no-debugfs")) {
      debugfs = false;
    } else {
      usage();
      return 2;
    }
  }
  try {
    const std::size_t n = hostrt::Device::count(backend);
    std::printf("== hostrt-smi ==\nbackend %s: %zu device(s)\n", hostrt::to_string(backend), n);
    for (std::size_t i = 0; i < n; ++i) {
      hostrt::Device d = hostrt::Device::open(i, backend);
      const hostrt::Capabilities& c = d.capabilities();
      std::printf("[%zu] %s\n", i, d.name().c_str());
      std::printf("    interface %u.%u, DMA mask %u bits, IOMMU %s\n", c.version_major, c.version_minor,
                  c.dma_mask_bits, c.iommu ? "yes" : "no");
      std::printf("    device buffer %s, max transfer %zu B, max BO %s, max segment %s\n",
                  bytes(c.device_buffer_size).c_str(), c.max_transfer, bytes(c.max_bo_size).c_str(),
                  bytes(c.max_segment_size).c_str());
      std::printf("    queues per file %u, copies per job %u, pinned by this process %s\n", c.max_queues,
                  c.max_ops, bytes(d.pinned_bytes()).c_str());
      if (!d.node().empty()) show_users(d.node());
      if (debugfs && !d.node().empty())
        for (const char* f : {"state", "engine", "queues", "pins"}) show_debugfs(d.node(), f);
    }
    return n ? 0 : 1;
  } catch (const hostrt::Error& e) {
    std::fprintf(stderr, "hostrt-smi: %s\n", e.what());
    return 1;
  }
}
