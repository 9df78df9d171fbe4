// The showcase run by `make run` inside the VM: finds the edu accelerators, shows what the
// driver reports about each, and proves the DMA path with a verified round trip.
// `hostrt-demo --workload` is the traced workload of `make trace` instead (see workload()).
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xf86drm.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"
#include "hostrt/hostrt.hpp"
#include "hostrt/pool.hpp"

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

void fill(void* p, std::size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * 131 + seed * 29 + 1);
}

// The hostrt runtime on device `index`: pinned and registered memory, two streams tied by an
// event, H2D, D2H and H2H copies, every byte checked. Returns the verdict line.
std::string runtime_check(std::size_t index) {
  try {
    hostrt::Device d = hostrt::Device::open(index, hostrt::Backend::Drm);
    const std::size_t n = 4000;
    hostrt::PinnedBuffer src = d.host_alloc(64 * 1024);
    std::vector<unsigned char> user(n + 64, 0);
    hostrt::PinnedBuffer reg = d.host_register(user.data() + 3, n);
    hostrt::Stream producer = d.create_stream(), consumer = d.create_stream();
    fill(src.data(), n, static_cast<unsigned>(index) + 1);
    producer.memcpy_async(hostrt::DevicePtr(50), src.data(), n);
    hostrt::Event written;
    written.record(producer);
    consumer.wait(written);
    consumer.memcpy_async(reg.data(), hostrt::DevicePtr(50), n);
    std::vector<unsigned char> pageable(10000);
    fill(pageable.data(), pageable.size(), 7);
    auto* big = static_cast<unsigned char*>(src.data()) + 8192;
    consumer.memcpy_async(big, pageable.data(), pageable.size(), hostrt::CopyKind::H2H);
    consumer.synchronize();
    if (std::memcmp(reg.data(), src.data(), n) != 0) return "FAIL H2D/D2H data mismatch";
    if (std::memcmp(big, pageable.data(), pageable.size()) != 0) return "FAIL H2H data mismatch";
    return "PASS pinned 64 KiB + registered " + std::to_string(n) + " B, 2 streams + event, " +
           std::to_string(producer.last_submitted() + consumer.last_submitted()) + " jobs, bytes verified";
  } catch (const hostrt::Error& e) {
    return std::string("FAIL ") + e.what();
  }
}

// Two processes (two clients of the driver) on device 0, each with two streams tied by an
// event and a pool whose blocks are freed stream-ordered: what `make trace` records, so that
// the timeline shows jobs of several queues waiting for the one engine, transfers, and the
// device buffer scrubbed whenever the client changes. Every byte is checked.
int workload() {
  auto one_client = [](unsigned seed) -> int {
    try {
      hostrt::Device d = hostrt::Device::open(0, hostrt::Backend::Drm);
      hostrt::Stream a = d.create_stream(), b = d.create_stream();
      hostrt::Pool pool(d);
      const std::size_t n = 16 * 1024;
      hostrt::PinnedBuffer out = d.host_alloc(n);
      for (unsigned round = 0; round < 4; ++round) {
        auto* src = static_cast<unsigned char*>(pool.allocate(n, a));
        fill(src, n, seed + round);
        a.memcpy_async(out.data(), src, n, hostrt::CopyKind::H2H);
        hostrt::Event copied;
        copied.record(a);
        pool.deallocate(src, a);  // reusable once a's copy has run
        // Stream b asks for the same size while a's copy still reads src: the pool must hand
        // b another block (the timeline's "pending" bar), and src again only after the copy.
        auto* scratch = static_cast<unsigned char*>(pool.allocate(n, b));
        fill(scratch, 2048, seed + round + 50);
        b.wait(copied);
        b.memcpy_async(hostrt::DevicePtr(0), scratch, 2048);
        b.memcpy_async(hostrt::DevicePtr(2048), out.data(), 2000);
        pool.deallocate(scratch, b);
        b.synchronize();
        std::vector<unsigned char> want(n);
        fill(want.data(), n, seed + round);
        if (std::memcmp(out.data(), want.data(), n) != 0) return 1;
      }
      return 0;
    } catch (const hostrt::Error& e) {
      std::fprintf(stderr, "workload: %s\n", e.what());
      return 1;
    }
  };
  const pid_t child = fork();
  // exit(), not _exit(): the child writes its HOSTRT_TRACE file at exit.
  if (child == 0) std::exit(one_client(100));
  const int mine = one_client(1);
  int status = 0;
  waitpid(child, &status, 0);
  const bool ok = mine == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("workload: 2 processes x 2 streams x 4 rounds of 16 KiB H2H + 2 H2D: %s\n",
              ok ? "PASS bytes verified" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--workload") return workload();
  const auto nodes = bound_edu_nodes();
  std::printf("== edu-accel demo ==\n");
  std::printf("devices bound to edu_accel: %zu\n", nodes.size());
  int failures = nodes.empty() ? 1 : 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    const auto state = read_text(n.debugfs + "/state").value_or("");
    std::printf("[%zu] %s  pci %s  driver %s\n", i, n.render.c_str(), n.pci.c_str(),
                driver_version(n.render).c_str());
    std::printf("    interrupt %s, DMA mask %s bits, liveness checked at probe\n",
                field(state, "irq").value_or("?").c_str(), field(state, "dma_bits").value_or("?").c_str());
    const auto verdict = trim(read_text(n.debugfs + "/selftest").value_or("FAIL cannot run self test"));
    std::printf("    DMA RAM -> device -> RAM: %s\n", verdict.c_str());
    if (verdict.rfind("PASS", 0) != 0) ++failures;
    const std::string rt = runtime_check(i);
    std::printf("    hostrt runtime: %s\n", rt.c_str());
    if (rt.rfind("PASS", 0) != 0) ++failures;
  }
  std::printf("== %s ==\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
