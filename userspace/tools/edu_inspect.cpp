// edu-inspect: makes a buffer the device can reach and shows where it is, as the three
// layers see it: the CPU's page tables (pagemap), the driver's SG table and DMA segments
// (debugfs bos) and what an unprivileged process learns (BO_INFO), and on a kernel with
// CONFIG_DMA_API_DEBUG the DMA API's own record (dma-api/dump); then, optionally, one
// copy's transfers and fences (tracefs) and a pool block's reuse. Run as root in the VM.
//
// usage: edu-inspect [--device N] [--size BYTES] [--userptr|--bo] [--copy] [--pool]
//                    [--above-mask] [--xlate FILE] [--check] [--full] [--hold]
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "inspect/inspect.hpp"

using namespace inspect;

namespace {

void usage() {
  std::fprintf(stderr,
               "usage: edu-inspect [--device N] [--size BYTES] [--userptr|--bo] [--copy] [--pool]\n"
               "                   [--above-mask] [--xlate FILE] [--check] [--full] [--hold]\n"
               "  --userptr/--bo  only registered user memory / only a driver BO (default: both)\n"
               "  --copy          copy the user memory into the BO and show its transfers\n"
               "  --pool          show when hostrt's pool hands a freed block out again\n"
               "  --above-mask    (no IOMMU) retry until the user memory has a page above the DMA\n"
               "                  mask, to show the refusal\n"
               "  --xlate FILE    write each transfer's IOVA page and the physical page it must\n"
               "                  reach (joined with QEMU's vtd_dmar_translate trace by tour.sh)\n"
               "  --check         verify the views against each other; exit 1 on a mismatch\n"
               "  --full          list every PFN run and segment (default: the first 8 and last 2)\n"
               "  --hold          keep the buffers until SIGINT/SIGTERM (look around meanwhile)\n");
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--device" && has_value) {
      o.device = std::strtoul(argv[++i], nullptr, 0);
    } else if (a == "--size" && has_value) {
      o.size = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--xlate" && has_value) {
      o.xlate = argv[++i];
    } else if (a == "--userptr") {
      o.bo = false;
    } else if (a == "--bo") {
      o.userptr = false;
    } else if (a == "--copy") {
      o.copy = true;
    } else if (a == "--pool") {
      o.pool = true;
    } else if (a == "--above-mask") {
      o.above_mask = true;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--full") {
      o.full = true;
    } else if (a == "--hold") {
      o.hold = true;
    } else {
      return false;
    }
  }
  return o.size > 0 && (o.userptr || o.bo);
}

// SIGTERM too: a shell without job control starts `edu-inspect --hold &` with SIGINT ignored.
void hold() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  std::printf(
      "\nholding the buffers: look at /sys/kernel/debug/dri/*/bos, /proc/%d/status ...;\n"
      "release with kill %d (or Ctrl-C in the foreground)\n",
      getpid(), getpid());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    usage();
    return 2;
  }
  try {
    Inspector in(o);
    in.run();
    if (o.hold) hold();
    return in.report_checks();
  } catch (const hostrt::Error& e) {
    std::fprintf(stderr, "edu-inspect: %s\n", e.what());
    return 1;
  }
}
