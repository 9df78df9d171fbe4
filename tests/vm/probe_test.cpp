// What probe refuses, checked where the machine is built for it (the bouncehigh
// configuration): a device that cannot reach the DMA layer's bounce pool is not bound, and
// the kernel log says why; no WARN is left for a user to trigger later.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "detail/sysfs.hpp"

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string kernel_log() {
  std::string out;
  if (FILE* p = popen("dmesg", "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  return out;
}

TEST(Probe, ADeviceThatCannotReachTheBouncePoolIsNotBound) {
  const std::string cmdline = read_all("/proc/cmdline");
  if (cmdline.find("swiotlb=force") == std::string::npos) GTEST_SKIP() << "mappings do not bounce here";
  const auto nodes = hostrt::detail::bound_edu_nodes();
  EXPECT_TRUE(nodes.empty()) << nodes.size() << " edu device(s) bound although every mapping would fail";
  const std::string log = kernel_log();
  const size_t at = log.find("every DMA mapping bounces through swiotlb at ");
  ASSERT_NE(at, std::string::npos) << "no reason in the kernel log";
  std::printf("%s\n",
              log.substr(log.rfind('\n', at) + 1, log.find('\n', at) - log.rfind('\n', at) - 1).c_str());
  EXPECT_NE(log.find("beyond the device's 28-bit mask: not binding", at), std::string::npos);
  EXPECT_EQ(log.find("swiotlb addr"), std::string::npos) << "the DMA layer warned about a mapping";
}

}  // namespace
