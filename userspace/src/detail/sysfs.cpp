#include "detail/sysfs.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace hostrt::detail {

namespace {
constexpr const char* kDriverDir = "/sys/bus/pci/drivers/edu_accel";

std::optional<int> render_minor_of(const fs::path& pci_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(pci_dir / "drm", ec)) {
    const std::string name = e.path().filename();
    if (name.rfind("renderD", 0) == 0) return std::stoi(name.substr(7));
  }
  return std::nullopt;
}
}  // namespace

std::vector<EduNode> bound_edu_nodes() {
  std::vector<EduNode> nodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kDriverDir, ec)) {
    const std::string name = e.path().filename();
    // Bound functions appear as links named by PCI address ("0000:00:02.0").
    if (name.size() != 12 || name[4] != ':' || !e.is_symlink()) continue;
    EduNode n;
    n.pci = name;
    if (auto minor = render_minor_of(e.path())) {
      n.render_minor = *minor;
      n.render = "/dev/dri/renderD" + std::to_string(*minor);
      n.debugfs = "/sys/kernel/debug/dri/" + std::to_string(*minor);
    }
    nodes.push_back(std::move(n));
  }
  std::sort(nodes.begin(), nodes.end(), [](const EduNode& a, const EduNode& b) { return a.pci < b.pci; });
  return nodes;
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return s.str();
}

std::optional<std::string> field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ": ", 0) == 0) return line.substr(key.size() + 2);
  }
  return std::nullopt;
}

}  // namespace hostrt::detail
