// The showcase run by `make run` inside the VM: finds the edu accelerators, shows what the
// driver reports about each, and proves the DMA path with a verified round trip.
#include <fcntl.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cstdio>
#include <string>

#include "detail/sysfs.hpp"

using namespace hostrt::detail;

namespace {

std::string driver_version(const std::string& node) {
  int fd = open(node.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return "cannot open";
  std::string s = "cannot query";
  if (drmVersionPtr v = drmGetVersion(fd)) {
    s = std::string(v->name, v->name_len) + " " + std::to_string(v->version_major) + "." +
        std::to_string(v->version_minor) + "." + std::to_string(v->version_patchlevel);
    drmFreeVersion(v);
  }
  close(fd);
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

int main() {
  const auto nodes = bound_edu_nodes();
  std::printf("== edu-accel demo ==\n");
  std::printf("devices bound to edu_accel: %zu\n", nodes.size());
  int failures = nodes.empty() ? 1 : 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    const auto state = read_text(n.debugfs + "/state").value_or("");
    std::printf("[%zu] %s  pci %s  driver %s\n", i, n.render.c_str(), n.pci.c_str(), driver_version(n.render).c_str());
    std::printf("    interrupt %s, DMA mask %s bits, liveness checked at probe\n",
                field(state, "irq").value_or("?").c_str(), field(state, "dma_bits").value_or("?").c_str());
    const auto verdict = trim(read_text(n.debugfs + "/selftest").value_or("FAIL cannot run self test"));
    std::printf("    DMA RAM -> device -> RAM: %s\n", verdict.c_str());
    if (verdict.rfind("PASS", 0) != 0) ++failures;
  }
  std::printf("== %s ==\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
