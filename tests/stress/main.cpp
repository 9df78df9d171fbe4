// edu_stress: adversarial stress of edu_accel, run as root inside the test VM; each attack
// runs in forked children that drop to unprivileged uids (1000, 1001) with RLIMIT_MEMLOCK.
//
// usage: edu_stress [--mode short|long] [--seed N] [--parts a,b,...] [--known-bug NAME[,NAME]]
//                   [--gcov-out DIR]
// parts: isolation fuzz kill fault unplug smp (default: all, in that order)
// --gcov-out: on a kernel with an instrumented edu_accel, the driver's gcov counters are copied
// to DIR/00-start and after each part to DIR/<NN>-<part>, so the host can tell what one part reached
// (scripts/coverage-report.sh: the fuzzer's own coverage).
// Prints each part's figures, then `STRESS <figure> <value>` lines the host-side
// tests/stress/run-stress.sh turns into the table and METRIC lines; exits 0 only when every
// check passed (checks named by --known-bug report KNOWN-BUG instead of failing).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "stress.hpp"

using namespace stress;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

// Counters are cumulative since the module loaded; a part's own reach is the difference of two
// snapshots. No-op without CONFIG_GCOV_KERNEL or an instrumented module.
void gcov_snapshot(const std::string& dir, const std::string& label) {
  namespace fs = std::filesystem;
  const fs::path root = "/sys/kernel/debug/gcov";
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(root, ec)) return;
  const fs::path to = fs::path(dir) / label;
  int n = 0;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename();
    if (name.rfind("edu_accel", 0) != 0 || it->path().extension() != ".gcda") continue;
    fs::create_directories(to, ec);
    // debugfs reports size 0: copy by reading, not with copy_file's size-based fast path.
    std::ifstream in(it->path(), std::ios::binary);
    std::ofstream out(to / name, std::ios::binary);
    out << in.rdbuf();
    n += out.good() ? 1 : 0;
  }
  logf("gcov: %d counter file(s) of edu_accel saved to %s", n, to.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Params P;
  std::vector<std::string> parts = {"isolation", "fuzz", "kill", "fault", "unplug", "smp"};
  std::string gcov_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "edu_stress: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--mode")
      P.long_run = next() == "long";
    else if (a == "--seed")
      P.seed = strtoull(next().c_str(), nullptr, 0);
    else if (a == "--parts")
      parts = split(next());
    else if (a == "--known-bug")
      for (auto& b : split(next())) P.known_bugs.insert(b);
    else if (a == "--gcov-out")
      gcov_dir = next();
    else {
      fprintf(stderr,
              "usage: edu_stress [--mode short|long] [--seed N] [--parts a,b] [--known-bug NAME] "
              "[--gcov-out DIR]\n");
      return 2;
    }
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string partlist;
  for (auto& p : parts) partlist += (partlist.empty() ? "" : ",") + p;
  logf("edu_stress: seed %llu, mode %s, parts %s (rerun: edu_stress --seed %llu --mode %s --parts %s)",
       static_cast<unsigned long long>(P.seed), P.long_run ? "long" : "short", partlist.c_str(),
       static_cast<unsigned long long>(P.seed), P.long_run ? "long" : "short", partlist.c_str());
  if (geteuid() != 0) {
    logf("edu_stress: must start as root (it drops privileges itself for every attack)");
    return 2;
  }
  auto nodes = hostrt::detail::bound_edu_nodes();
  for (auto& n : nodes) {
    struct stat sb {};
    stat(n.render.c_str(), &sb);
    logf("device %s %s mode %04o (made 0666 for the unprivileged users, as a udev rule would)", n.pci.c_str(),
         n.render.c_str(), sb.st_mode & 07777);
  }
  shared();
  KernelLog klog;
  std::vector<Part> results;
  int failures = 0, reports_total = 0;
  gcov_snapshot(gcov_dir, "00-start");
  for (auto& name : parts) {
    Part part;
    part.name = name;
    part.params = &P;
    logf("== part %s ==", name.c_str());
    const double t0 = now_s();
    if (name == "fuzz")
      fuzz_part(P, part);
    else if (name == "kill")
      kill_part(P, part);
    else if (name == "unplug")
      unplug_part(P, part);
    else if (name == "fault")
      fault_part(P, part);
    else if (name == "isolation")
      isolation_part(P, part);
    else if (name == "smp")
      smp_part(P, part);
    else {
      logf("unknown part %s", name.c_str());
      return 2;
    }
    gcov_snapshot(gcov_dir,
                  (results.size() < 9 ? "0" : "") + std::to_string(results.size() + 1) + "-" + name);
    const int reports = klog.scan(name.c_str());
    reports_total += reports;
    if (reports) part.fail("%d kernel report(s) in the log during this part", reports);
    std::string figs;
    for (auto& [k, v] : part.figures) figs += " " + k + "=" + std::to_string(v);
    const char* verdict = part.skipped             ? "SKIP"
                          : !part.failures.empty() ? "FAIL"
                          : !part.known.empty()    ? "KNOWN-BUG"
                                                   : "PASS";
    logf("== part %s: %s in %.0f s (guest time);%s kernel_reports=%d leaked_pins=%lld%s%s", name.c_str(),
         verdict, now_s() - t0, figs.c_str(), reports, static_cast<long long>(part.leaked_pins),
         part.skipped ? " skipped: " : "", part.skip_reason.c_str());
    printf("STRESS-PART %s %s\n", name.c_str(), verdict);
    failures += static_cast<int>(part.failures.size());
    results.push_back(std::move(part));
  }
  int64_t leaked_pins = 0;
  uint64_t leaked_objects = 0;
  for (auto& p : results) {
    leaked_pins += p.leaked_pins;
    leaked_objects += p.leaked_objects;
  }
  Shared* s = shared();
  int distinct = 0;
  for (auto& b : s->errno_bits) distinct += __builtin_popcountll(b.load());
  printf("STRESS ioctls %llu\n", static_cast<unsigned long long>(s->ioctls.load()));
  printf("STRESS distinct_errnos %d\n", distinct);
  printf("STRESS processes_killed %llu\n", static_cast<unsigned long long>(s->killed.load()));
  printf("STRESS unplugs %llu\n", static_cast<unsigned long long>(s->unplugs.load()));
  printf("STRESS faults_injected %llu\n", static_cast<unsigned long long>(s->faults.load()));
  printf("STRESS bytes_verified %llu\n", static_cast<unsigned long long>(s->bytes_verified.load()));
  printf("STRESS corrupted_bytes %llu\n", static_cast<unsigned long long>(s->corrupted.load()));
  printf("STRESS guest_kernel_reports %d\n", reports_total);
  printf("STRESS leaked_pins %lld\n", static_cast<long long>(leaked_pins));
  printf("STRESS leaked_objects %llu\n", static_cast<unsigned long long>(leaked_objects));
  printf("STRESS-RESULT %s seed %llu: %d failed check(s)\n", failures ? "FAIL" : "PASS",
         static_cast<unsigned long long>(P.seed), failures);
  fflush(nullptr);
  return failures ? 1 : 0;
}
