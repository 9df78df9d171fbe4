// The parts of edu_stress and how each reports: figures, failures, known bugs.
#pragma once

#include <map>
#include <set>

#include "stress_util.hpp"

namespace stress {

struct Params {
  bool long_run = false;
  uint64_t seed = 1;
  std::set<std::string> known_bugs;  // checks expected to fail on today's driver (--known-bug)
};

// One part's verdict and figures.
struct Part {
  std::string name;
  std::vector<std::string> failures;
  std::vector<std::string> known;  // failed checks named by --known-bug
  std::map<std::string, uint64_t> figures;
  int64_t leaked_pins = 0;
  uint64_t leaked_objects = 0;
  bool skipped = false;
  std::string skip_reason;
  const Params* params = nullptr;

  int fail(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    failures.push_back(buf);
    logf("FAIL %s: %s (seed %llu)", name.c_str(), buf, static_cast<unsigned long long>(params->seed));
    return 1;
  }
  // A check that names a known driver bug: a failure is reported as KNOWN-BUG (not counted
  // as a failure) only when that bug was named with --known-bug; a pass is always reported.
  void check_known(bool ok, const char* bug, const char* fmt, ...) __attribute__((format(printf, 4, 5))) {
    va_list ap;
    va_start(ap, fmt);
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (ok) {
      if (params->known_bugs.count(bug))
        logf("FIXED? %s: check '%s' passed although --known-bug %s was given: drop the flag", name.c_str(),
             bug, bug);
      return;
    }
    if (params->known_bugs.count(bug)) {
      known.push_back(std::string(bug) + ": " + buf);
      logf("KNOWN-BUG %s [%s]: %s", name.c_str(), bug, buf);
    } else {
      failures.push_back(std::string(bug) + ": " + buf);
      logf("FAIL %s [%s]: %s (seed %llu)", name.c_str(), bug, buf,
           static_cast<unsigned long long>(params->seed));
    }
  }
  void figure(const std::string& k, uint64_t v) { figures[k] += v; }
  void skip(const std::string& why) {
    skipped = true;
    skip_reason = why;
  }
};

// After a part's processes are gone: every pin it took is released and the driver accounts no
// client of it; each failure is counted in the part's figures.
inline void check_released(Part& part, const std::vector<hostrt::detail::EduNode>& nodes, int64_t pins0,
                           const char* after) {
  const int64_t leaked = settle_pins(pins0);
  part.leaked_pins += leaked;
  if (leaked) part.fail("%lld pinned pages not released after %s", static_cast<long long>(leaked), after);
  if (auto cl = settle_clients(nodes); !cl.empty()) {
    part.leaked_objects += cl.size();
    part.fail("the driver still accounts %zu client(s) after every file closed: %s", cl.size(),
              cl[0].c_str());
  }
}

int fuzz_part(const Params& P, Part& part);
int kill_part(const Params& P, Part& part);
int unplug_part(const Params& P, Part& part);
int fault_part(const Params& P, Part& part);
int isolation_part(const Params& P, Part& part);
int smp_part(const Params& P, Part& part);

}  // namespace stress
