// Where the kernel shows each bound edu_accel device: sysfs, /dev/dri and debugfs.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hostrt::detail {

struct EduNode {
  std::string pci;     // "0000:00:02.0"
  std::string render;  // "/dev/dri/renderD128"
  int render_minor = -1;
  std::string debugfs;  // "/sys/kernel/debug/dri/128" (present when debugfs is mounted)
};

// Devices bound to the edu_accel driver, in PCI address order.
std::vector<EduNode> bound_edu_nodes();

// Whole contents of a (small, pseudo) file, or nullopt when it cannot be read.
std::optional<std::string> read_text(const std::string& path);

// The value of "key: value" in a debugfs-style text, or nullopt.
std::optional<std::string> field(const std::string& text, const std::string& key);

}  // namespace hostrt::detail
