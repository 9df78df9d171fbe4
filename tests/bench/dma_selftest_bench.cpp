// In-VM benchmark of the simplest DMA path (debugfs self test: one 4095-byte transfer each
// way, completed by interrupt). Under icount the guest clock is virtual, so the figure is the
// device's own latency: 2 x 100 ms per round trip on QEMU 7.2.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"

using namespace hostrt::detail;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 5;
  const auto nodes = bound_edu_nodes();
  if (nodes.empty()) {
    std::fprintf(stderr, "no edu_accel device\n");
    return 1;
  }
  std::vector<double> us;
  for (int i = 0; i < rounds; ++i) {
    const auto v = read_text(nodes[0].debugfs + "/selftest").value_or("");
    unsigned bytes = 0;
    long long t = 0;
    if (std::sscanf(v.c_str(), "PASS %u-byte round trip in %lld us", &bytes, &t) != 2) {
      std::fprintf(stderr, "self test failed: %s\n", v.c_str());
      return 1;
    }
    us.push_back(static_cast<double>(t));
  }
  std::sort(us.begin(), us.end());
  const double median_ms = us[us.size() / 2] / 1000.0;
  std::printf("METRIC selftest_roundtrip_ms %.1f ms\n", median_ms);
  // Bytes moved per round trip over the device limit of 4095 bytes per 100 ms each way.
  std::printf("METRIC selftest_engine_utilization %.3f ratio\n", 200.0 / median_ms);
  return 0;
}
