// Part "fault": allocation and pin failures injected into the driver's ioctl paths (debug
// kernel only: failslab, fail_page_alloc, fail_function). Two phases, both unprivileged:
//  - systematic: for each ioctl scenario, /proc/thread-self/fail-nth fails its 1st, 2nd, ...
//    fault point until the call completes without reaching the n-th one; each failed call
//    must return an error, and no pin, charge or object may stay behind;
//  - random: task-filtered failslab/fail_page_alloc at a probability, armed with
//    /proc/self/make-it-fail around each ioctl of a random workload.
//  - fail_function: the driver's functions marked ALLOW_ERROR_INJECTION return -ENOMEM at a
//    probability during the same random workload.
#include <fstream>
#include <sstream>

#include "stress.hpp"

namespace stress {
namespace {

const char* kSlab = "/sys/kernel/debug/failslab";
const char* kPage_ = "/sys/kernel/debug/fail_page_alloc";
const char* kFunc = "/sys/kernel/debug/fail_function";

bool put(const std::string& path, const std::string& v) {
  int fd = open(path.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0) return false;
  bool ok = write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
  close(fd);
  return ok;
}
long long get_num(const std::string& path) {
  auto t = hostrt::detail::read_text(path);
  return t ? atoll(t->c_str()) : -1;
}

class FailNth {
 public:
  FailNth() {
    char path[64];
    snprintf(path, sizeof path, "/proc/thread-self/fail-nth");
    fd_ = open(path, O_RDWR | O_CLOEXEC);
  }
  ~FailNth() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  void set(unsigned n) {
    char b[16];
    int len = snprintf(b, sizeof b, "%u", n);
    if (pwrite(fd_, b, static_cast<size_t>(len), 0) != len) abort();
  }
  unsigned get() {
    char b[16] = {};
    if (pread(fd_, b, sizeof b - 1, 0) <= 0) return ~0u;
    return static_cast<unsigned>(strtoul(b, nullptr, 10));
  }

 private:
  int fd_ = -1;
};

// One scenario: setup (not armed), the single armed call returning 0 or an errno, cleanup.
struct Scenario {
  const char* name;
  std::function<void()> setup;
  std::function<int()> call;
  std::function<void(int)> cleanup;
};

struct Sweep {
  uint64_t faults = 0, survived = 0, calls = 0;
  std::vector<std::string> problems;
};

// Everything of one sweep runs in the calling (unprivileged) process.
void sweep(const std::string& render, int round, unsigned cap, bool fresh_userptr, Sweep& out) {
  FailNth nth;
  Fd f(render);
  const int fd = f.get();
  if (!nth.ok() || fd < 0) {
    out.problems.push_back("cannot open fail-nth or the render node");
    return;
  }
  const size_t big = (64u << 10) << round;
  drm_edu_accel_queue_create q;
  Mapped src, dst;
  uint32_t sync_in = 0, sync_out = 0;
  if (queue_create(fd, &q) || mapped_bo(fd, big, &src) || mapped_bo(fd, big, &dst) ||
      drmSyncobjCreate(fd, DRM_SYNCOBJ_CREATE_SIGNALED, &sync_in) || drmSyncobjCreate(fd, 0, &sync_out)) {
    out.problems.push_back("setup failed without injection");
    return;
  }
  std::vector<uint8_t> touched(big + kPage, 3);
  const uint64_t charged0 = param(fd, DRM_EDU_ACCEL_PARAM_PINNED_BYTES);

  uint32_t h = 0;
  int ofd = -1;
  void* map = nullptr;
  uint8_t* fresh = nullptr;
  uint64_t off = 0, seq = 0;
  drm_edu_accel_queue_create q2;
  uint32_t sync_a = 0, sync_b = 0;
  auto close_h = [&](int rc) {
    if (!rc && h) gem_close(fd, h);
    h = 0;
  };
  std::vector<Scenario> sc = {
      {"open", [] {},
       [&] {
         ofd = open(render.c_str(), O_RDWR | O_CLOEXEC);
         return ofd < 0 ? errno : 0;
       },
       [&](int rc) {
         if (!rc) close(ofd);
       }},
      {"BO_CREATE 1 page", [] {}, [&] { return bo_create(fd, kPage, &h, &off); }, close_h},
      {"BO_CREATE big", [] {}, [&] { return bo_create(fd, big, &h, &off); }, close_h},
      {"BO_USERPTR touched",
       [&] {
         fresh = touched.data();
         if (fresh_userptr) {  // pages no other live registration shares
           fresh = static_cast<uint8_t*>(
               mmap(nullptr, big + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
           memset(fresh, 3, big + kPage);
         }
       },
       [&] { return bo_userptr(fd, fresh + 9, big, 0, &h); },
       [&](int rc) {
         close_h(rc);
         if (fresh_userptr) munmap(fresh, big + kPage);
       }},
      {"BO_USERPTR untouched",
       [&] {
         fresh = static_cast<uint8_t*>(
             mmap(nullptr, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
       },
       [&] { return bo_userptr(fd, fresh, big, 0, &h); },
       [&](int rc) {
         close_h(rc);
         munmap(fresh, big);
       }},
      {"BO_USERPTR readonly",
       [&] {
         fresh = static_cast<uint8_t*>(mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
       },
       [&] { return bo_userptr(fd, fresh, big, DRM_EDU_ACCEL_BO_USERPTR_READONLY, &h); },
       [&](int rc) {
         close_h(rc);
         munmap(fresh, big);
       }},
      {"BO_INFO", [] {},
       [&] {
         drm_edu_accel_bo_info i;
         return bo_info(fd, src.handle, &i);
       },
       [](int) {}},
      {"QUEUE_CREATE", [] {}, [&] { return queue_create(fd, &q2); },
       [&](int rc) {
         if (!rc) queue_destroy(fd, q2.queue);
       }},
      // A file's first queue also creates the file's completion page (a BO and its handle).
      {"QUEUE_CREATE on a new file", [&] { ofd = open(render.c_str(), O_RDWR | O_CLOEXEC); },
       [&] { return queue_create(ofd, &q2); },
       [&](int) {
         close(ofd);
         ofd = -1;
       }},
      {"QUEUE_DESTROY", [&] { queue_create(fd, &q2); }, [&] { return queue_destroy(fd, q2.queue); },
       [](int) {}},
      {"SUBMIT H2H with syncs", [] {},
       [&] {
         auto o =
             op(DRM_EDU_ACCEL_OP_H2H, src.handle, 1, dst.handle, 3, std::min<size_t>(big - 3, 3 * kChunk));
         drm_edu_accel_sync in = sync_point(sync_in), out2 = sync_point(sync_out);
         return submit(fd, q.queue, &o, 1, &in, 1, &out2, 1, &seq);
       },
       [&](int rc) {
         if (!rc) wait_syncobj(fd, sync_out, 600);
       }},
      // Fences of two queues (two contexts): the scheduler stores the second dependency in a
      // node of its own (the first sits in the xarray's head), an allocation that can fail.
      {"SUBMIT after two queues' jobs",
       [&] {
         queue_create(fd, &q2);
         drmSyncobjCreate(fd, 0, &sync_a);
         drmSyncobjCreate(fd, 0, &sync_b);
         auto o = op(DRM_EDU_ACCEL_OP_H2H, src.handle, 0, dst.handle, 0, 100);
         drm_edu_accel_sync a = sync_point(sync_a), b = sync_point(sync_b);
         submit(fd, q.queue, &o, 1, nullptr, 0, &a, 1);
         submit(fd, q2.queue, &o, 1, nullptr, 0, &b, 1);
       },
       [&] {
         auto o = op(DRM_EDU_ACCEL_OP_H2H, src.handle, 0, dst.handle, 0, 100);
         drm_edu_accel_sync in[2] = {sync_point(sync_a), sync_point(sync_b)}, out2 = sync_point(sync_out);
         return submit(fd, q.queue, &o, 1, in, 2, &out2, 1, &seq);
       },
       [&](int rc) {
         if (!rc) wait_syncobj(fd, sync_out, 600);
         wait_syncobj(fd, sync_b, 600);
         queue_destroy(fd, q2.queue);
         drmSyncobjDestroy(fd, sync_a);
         drmSyncobjDestroy(fd, sync_b);
       }},
      {"SUBMIT H2D+D2H", [] {},
       [&] {
         drm_edu_accel_copy_op o[2] = {op(DRM_EDU_ACCEL_OP_H2D, src.handle, 0, 0, 0, kChunk),
                                       op(DRM_EDU_ACCEL_OP_D2H, 0, 0, dst.handle, 0, kChunk)};
         drm_edu_accel_sync out2 = sync_point(sync_out);
         return submit(fd, q.queue, o, 2, nullptr, 0, &out2, 1, &seq);
       },
       [&](int rc) {
         if (!rc) wait_syncobj(fd, sync_out, 600);
       }},
      {"GEM_CLOSE", [&] { bo_create(fd, kPage, &h, &off); }, [&] { return gem_close(fd, h); },
       [&](int rc) {
         if (rc) gem_close(fd, h);
         h = 0;
       }},
      {"SYNCOBJ_CREATE", [] {}, [&] { return drmSyncobjCreate(fd, 0, &h) ? errno : 0; },
       [&](int rc) {
         if (!rc) drmSyncobjDestroy(fd, h);
         h = 0;
       }},
      {"mmap BO", [] {},
       [&] {
         drm_edu_accel_bo_info i;
         bo_info(fd, src.handle, &i);
         map = mmap(nullptr, src.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                    static_cast<off_t>(i.mmap_offset));
         return map == MAP_FAILED ? errno : 0;
       },
       [&](int rc) {
         if (!rc) munmap(map, src.size);
       }},
      {"close a busy file",
       [&] {
         ofd = open(render.c_str(), O_RDWR | O_CLOEXEC);
         uint32_t hh = 0, uh = 0;
         drm_edu_accel_queue_create qq;
         bo_create(ofd, 2 * kPage, &hh);
         uint8_t* m = touched.data();
         if (fresh_userptr) {
           m = static_cast<uint8_t*>(
               mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
           memset(m, 1, 3 * kPage);
         }
         bo_userptr(ofd, m, 3 * kPage, 0, &uh);
         if (fresh_userptr) munmap(m, 3 * kPage);
         queue_create(ofd, &qq);
         auto o = op(DRM_EDU_ACCEL_OP_H2H, uh, 0, hh, 0, 2 * kPage);
         submit(ofd, qq.queue, &o, 1, nullptr, 0, nullptr, 0);
       },
       [&] { return close(ofd) ? errno : 0; }, [](int) {}},
  };
  for (auto& s : sc) {
    unsigned n = 1;
    for (; n <= cap; ++n) {
      s.setup();
      nth.set(n);
      const int rc = s.call();
      const unsigned left = nth.get();
      nth.set(0);
      s.cleanup(rc);
      ++out.calls;
      if (left != 0) {  // completed before its n-th fault point: the sweep of this call is done
        if (rc) out.problems.push_back(std::string(s.name) + " fails without injection: " + strerror(rc));
        break;
      }
      ++out.faults;
      if (rc == 0) ++out.survived;  // e.g. a kvmalloc fallback: fine, as long as nothing leaks
    }
  }
  close_h(1);
  // Every failed or undone call returned its charge.
  const uint64_t charged = param(fd, DRM_EDU_ACCEL_PARAM_PINNED_BYTES);
  if (charged != charged0)
    out.problems.push_back("PINNED_BYTES " + std::to_string(charged) + " after the sweep, " +
                           std::to_string(charged0) + " before");
}

// A random mix of BO_CREATE, BO_USERPTR, SUBMIT, QUEUE_CREATE/DESTROY, GEM_CLOSE and syncobj
// calls, each with this process's make-it-fail armed around it (the injectors are
// task-filtered), counting the calls that failed. Runs in a child; returns its exit code.
// Writing make-it-fail needs CAP_SYS_RESOURCE: the workload stays root (so BO_USERPTR is not
// charged to RLIMIT_MEMLOCK here; the fail-nth sweeps run unprivileged).
int random_workload(const Params& P, const std::string& render, int ops, uint64_t stream, uint64_t* failed) {
  int mif = open("/proc/self/make-it-fail", O_WRONLY | O_CLOEXEC);
  if (mif < 0) return 91;
  auto arm = [&](bool on) {
    if (pwrite(mif, on ? "1" : "0", 1, 0) != 1) _exit(93);
  };
  Rng r(P.seed, stream);
  Fd f(render);
  const int fd = f.get();
  std::vector<uint8_t> mem(1 << 20, 1);
  const bool fresh = P.known_bugs.count("dma_api_overlapping_userptr") > 0;
  std::vector<uint32_t> hs;
  drm_edu_accel_queue_create q;
  if (fd < 0 || queue_create(fd, &q)) return 92;
  uint32_t done = 0;
  drmSyncobjCreate(fd, 0, &done);
  for (int i = 0; i < ops; ++i) {
    int rc = 0;
    uint32_t h = 0;
    const uint64_t d = r.below(6);
    arm(true);
    if (d == 0)
      rc = bo_create(fd, r.range(1, 128 << 10), &h);
    else if (d == 1) {
      uint8_t* base = mem.data();
      if (fresh) {  // pages no other live registration shares
        arm(false);
        base = static_cast<uint8_t*>(
            mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        memset(base, 1, 1 << 20);
        arm(true);
      }
      rc = bo_userptr(fd, base + r.below(4096), r.range(1, 512 << 10), 0, &h);
      if (fresh) {
        arm(false);
        munmap(base, 1 << 20);
      }
    } else if (d == 2 && hs.size() >= 2) {
      auto o =
          op(DRM_EDU_ACCEL_OP_H2H, hs[r.below(hs.size())], 0, hs[r.below(hs.size())], 0, 1 + r.below(4096));
      drm_edu_accel_sync out = sync_point(done);
      rc = submit(fd, q.queue, &o, 1, nullptr, 0, &out, 1);
    } else if (d == 3) {
      drm_edu_accel_queue_create q2;
      rc = queue_create(fd, &q2);
      if (!rc) {
        arm(false);
        queue_destroy(fd, q2.queue);
      }
    } else if (d == 4 && !hs.empty()) {
      const size_t k = r.below(hs.size());
      rc = gem_close(fd, hs[k]);
      if (!rc) hs.erase(hs.begin() + static_cast<long>(k));
    } else {
      uint32_t s = 0;
      rc = drmSyncobjCreate(fd, 0, &s) ? errno : 0;
      if (!rc) drmSyncobjDestroy(fd, s);
    }
    arm(false);
    if (rc) ++*failed;
    if (h && !rc) hs.push_back(h);
    if (hs.size() > 24) {
      gem_close(fd, hs.front());
      hs.erase(hs.begin());
    }
  }
  wait_syncobj(fd, done, 600);
  return 0;
}

}  // namespace

int fault_part(const Params& P, Part& part) {
  auto nodes = nodes_open_to_all();
  if (nodes.empty()) return part.fail("no edu_accel device bound");
  const bool slab = access(kSlab, F_OK) == 0, page = access(kPage_, F_OK) == 0;
  if (!slab && !page) {
    part.skip("no failslab/fail_page_alloc in this kernel (fault injection exists only in the debug kernel)");
    logf("fault: SKIPPED: %s", part.skip_reason.c_str());
    return 0;
  }
  const int64_t pins0 = pins_outstanding();
  // Fail GFP_KERNEL allocations too, of every order, quietly; only tasks that ask.
  for (const char* d : {kSlab, kPage_}) {
    std::string b = d;
    put(b + "/verbose", "0");
    put(b + "/probability", "0");
    put(b + "/interval", "1");
    put(b + "/times", "-1");
    put(b + "/task-filter", "Y");
    put(b + "/ignore-gfp-wait", "N");
  }
  put(std::string(kPage_) + "/ignore-gfp-highmem", "N");
  put(std::string(kPage_) + "/min-order", "0");

  // Systematic sweeps, in a child so the parent's own work never sees a fault.
  const int rounds = P.long_run ? 4 : 1;
  const unsigned cap = P.long_run ? 400 : 40;
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* res = static_cast<uint64_t*>(mem);
  uint64_t faults = 0, survived = 0, calls = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string render = nodes[round % nodes.size()].render;
    res[0] = res[1] = res[2] = 0;
    const int rc = run_child(
        [&] {
          if (!drop_to(kUidA, 64 << 20)) return 90;
          Sweep s;
          sweep(render, round, cap, P.known_bugs.count("dma_api_overlapping_userptr") > 0, s);
          res[0] = s.faults;
          res[1] = s.survived;
          res[2] = s.calls;
          for (auto& p : s.problems) logf("  fault sweep round %d: %s", round, p.c_str());
          return s.problems.empty() ? 0 : 1;
        },
        1800);
    faults += res[0];
    survived += res[1];
    calls += res[2];
    if (rc)
      part.fail("fail-nth sweep round %d: %s (exit %d)", round, rc == -1 ? "hung" : "problems above", rc);
  }
  logf("fault: fail-nth: %llu calls, %llu faults injected, %llu calls recovered from their fault",
       static_cast<unsigned long long>(calls), static_cast<unsigned long long>(faults),
       static_cast<unsigned long long>(survived));

  // Random: probability-based, armed around each ioctl of a random workload.
  const long long budget = 1000000;
  for (const char* d : {kSlab, kPage_}) {
    put(std::string(d) + "/times", std::to_string(budget));
    put(std::string(d) + "/probability", P.long_run ? "10" : "20");
  }
  const int ops = P.long_run ? 3000 : 300;
  uint64_t failed_calls = 0;
  res[0] = 0;
  const int rrc = run_child([&] { return random_workload(P, nodes[0].render, ops, 4, &res[0]); }, 1800);
  failed_calls = res[0];
  long long injected = 0;
  for (const char* d : {kSlab, kPage_}) {
    const long long left = get_num(std::string(d) + "/times");
    if (left >= 0) injected += budget - left;
    put(std::string(d) + "/probability", "0");
    put(std::string(d) + "/times", "-1");
  }
  if (rrc) part.fail("random fault workload exited %d", rrc);
  logf(
      "fault: random (task-filtered, make-it-fail around each ioctl): %d calls, %llu failed, %lld faults "
      "injected",
      ops, static_cast<unsigned long long>(failed_calls), injected);
  faults += static_cast<uint64_t>(std::max(0ll, injected));

  // fail_function: the driver's own functions marked ALLOW_ERROR_INJECTION (pinning, DMA
  // mapping, page allocation, the memlock charge, SUBMIT's in-syncs) return -ENOMEM at a
  // probability, armed like the random phase: every caller must unwind what it did before.
  std::vector<std::string> funcs;
  if (auto inj = hostrt::detail::read_text(std::string(kFunc) + "/injectable")) {
    std::istringstream in(*inj);
    for (std::string line; std::getline(in, line);)
      if (line.find("[edu_accel]") != std::string::npos)
        funcs.push_back(line.substr(0, line.find_first_of(" \t")));
  }
  if (funcs.empty()) {
    logf("fault: fail_function: %s", access(kFunc, F_OK) == 0
                                         ? "no edu_accel function is marked ALLOW_ERROR_INJECTION: FAIL"
                                         : "absent in this kernel");
    if (access(kFunc, F_OK) == 0) part.fail("fail_function lists no edu_accel function");
  } else {
    const std::string f = kFunc;
    put(f + "/inject", "\n");  // none but ours
    std::string names;
    for (const auto& fn : funcs) {
      if (!put(f + "/inject", fn)) part.fail("fail_function: cannot inject %s", fn.c_str());
      put(f + "/" + fn + "/retval", std::to_string(static_cast<unsigned long>(-ENOMEM)));
      names += (names.empty() ? "" : " ") + fn;
    }
    put(f + "/verbose", "0");
    put(f + "/interval", "1");
    put(f + "/task-filter", "Y");
    put(f + "/times", std::to_string(budget));
    put(f + "/probability", P.long_run ? "20" : "30");
    const int fops = P.long_run ? 1000 : 150;
    res[0] = 0;
    const int frc = run_child([&] { return random_workload(P, nodes[0].render, fops, 5, &res[0]); }, 1800);
    const long long left = get_num(f + "/times");
    const long long finjected = left >= 0 ? budget - left : 0;
    put(f + "/probability", "0");
    put(f + "/inject", "\n");
    if (frc) part.fail("fail_function workload exited %d", frc);
    if (finjected == 0) part.fail("fail_function injected nothing into %s", names.c_str());
    logf("fault: fail_function on %s: %d calls, %llu failed, %lld faults injected", names.c_str(), fops,
         static_cast<unsigned long long>(res[0]), finjected);
    faults += static_cast<uint64_t>(finjected);
  }

  check_released(part, nodes, pins0, "fault injection");
  for (size_t i = 0; i < nodes.size(); ++i)
    if (verified_copy_as_user(nodes[i].render, mix(P.seed + 41 + i), 3 * kChunk, false))
      part.fail("verified copy on %s failed after fault injection", nodes[i].render.c_str());
  shared()->faults += faults;
  part.figure("faults_injected", faults);
  return 0;
}

}  // namespace stress
