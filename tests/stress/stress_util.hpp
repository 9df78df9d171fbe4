// Shared pieces of the adversarial stress program (edu_stress): counters visible across
// fork, seeded randomness, privilege dropping, children with timeouts, kernel-log scanning,
// and a verified copy through the device.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xf86drm.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"
#include "proc_util.hpp"

namespace stress {

using namespace edu_test;

constexpr uint64_t kPage = 4096;
constexpr uint32_t kChunk = 4095;  // largest edu transfer QEMU 7.2 accepts
constexpr uid_t kUidA = 1000;      // the unprivileged attacker / user
constexpr uid_t kUidB = 1001;      // a second, unrelated user

// Counters in a MAP_SHARED page: every forked child adds to the same figures.
struct Shared {
  std::atomic<uint64_t> ioctls;
  std::atomic<uint64_t> errno_bits[4];  // errnos 0..255 seen from fuzzed calls
  std::atomic<uint64_t> killed;
  std::atomic<uint64_t> killed_in_phase[4];  // 0 setup, 1 pinning, 2 submitting, 3 DMA in flight
  std::atomic<uint64_t> unplugs;
  std::atomic<uint64_t> faults;
  std::atomic<uint64_t> faults_survived;  // an injected fault the call recovered from (fallback)
  std::atomic<uint64_t> bytes_verified;
  std::atomic<uint64_t> corrupted;
  std::atomic<uint64_t> sigbus;        // touching a BO mapping after MADV_DONTNEED
  std::atomic<uint64_t> sigbus_other;  // touching a fresh BO mapping
  std::atomic<uint64_t> enodev_seen;
  std::atomic<int> phase[64];  // per kill-storm victim slot
};

inline Shared* shared() {
  static Shared* s = [] {
    void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    return new (p) Shared();
  }();
  return s;
}

inline void note_errno(int e) {
  if (e < 0 || e >= 256) e = 255;
  shared()->errno_bits[e / 64].fetch_or(1ull << (e % 64));
}

// splitmix64 mixing so each (seed, part, index) gets an independent stream.
inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(mix(seed)) {}
  Rng(uint64_t seed, uint64_t a, uint64_t b = 0) : g(mix(mix(seed ^ mix(a)) ^ mix(b + 0x1234567))) {}
  uint64_t next() { return g(); }
  uint64_t below(uint64_t n) { return n ? g() % n : 0; }
  uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(g) < p; }
  void fill(uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(g() >> 17);
  }
};

inline void logf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stdout, "%s\n", buf);
  fflush(stdout);
}

inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

inline int64_t abs_ns(double seconds_from_now) {
  return static_cast<int64_t>((now_s() + seconds_from_now) * 1e9);
}

// Drops root for good: supplementary groups, gid, uid; RLIMIT_MEMLOCK set first. Keeps the
// process dumpable so its own /proc/self files (fail-nth, make-it-fail) stay writable.
inline bool drop_to(uid_t uid, rlim_t memlock) {
  rlimit lim{memlock, memlock};
  if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return false;
  if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) return false;
  prctl(PR_SET_DUMPABLE, 1);
  return getuid() == uid && geteuid() == uid;
}

// Forks body; returns its exit status (0..255), 128+signal, or -1 when it outlived timeout_s
// (then it is SIGKILLed and reaped).
inline int run_child(const std::function<int()>& body, double timeout_s) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return -2;
  if (pid == 0) {
    int rc = body();
    fflush(nullptr);
    _exit(rc);
  }
  const double end = now_s() + timeout_s;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (now_s() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(20000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for several children; returns how many did not exit 0 (a timeout kills the rest).
inline int wait_children(std::vector<pid_t>& pids, double timeout_s, const char* what) {
  int bad = 0;
  const double end = now_s() + timeout_s;
  for (pid_t pid : pids) {
    int status = 0;
    for (;;) {
      pid_t r = waitpid(pid, &status, WNOHANG);
      if (r == pid) break;
      if (now_s() > end) {
        logf("FAIL %s: child %d still running after %.0f s (hung in the kernel?), killing it", what, pid,
             timeout_s);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
        break;
      }
      usleep(20000);
    }
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++bad;
      if (status != -1)
        logf("  %s: child %d %s %d", what, pid, WIFEXITED(status) ? "exited" : "killed by signal",
             WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
  }
  pids.clear();
  return bad;
}

// The kernel log from a point on: /dev/kmsg records after open, scanned for the markers of a
// kernel bug (the same as qemu/check-guest.sh's judge).
class KernelLog {
 public:
  KernelLog() {
    fd_ = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ >= 0) lseek(fd_, 0, SEEK_END);
  }
  ~KernelLog() {
    if (fd_ >= 0) close(fd_);
  }
  // Reports since the last call; prints the first few.
  int scan(const char* part) {
    static const std::regex pat(
        "(Oops|BUG:|kernel BUG|WARNING:|refcount_t:|general protection|Kernel panic|UBSAN:|INFO: task .* "
        "blocked|INFO: (possible|inconsistent)|watchdog: BUG|ODEBUG:|DMA-API: [^ ]+ [0-9a-f]{4}:)");
    if (fd_ < 0) return 0;
    int reports = 0;
    char buf[8192];
    for (;;) {
      ssize_t n = read(fd_, buf, sizeof buf - 1);
      if (n < 0 && errno == EPIPE) continue;  // overwritten records: go on with the next
      if (n <= 0) break;
      buf[n] = 0;
      const char* msg = strchr(buf, ';');
      msg = msg ? msg + 1 : buf;
      std::string line(msg, strcspn(msg, "\n"));
      if (std::regex_search(line, pat)) {
        if (reports < 5) logf("  kernel report during %s: %s", part, line.c_str());
        ++reports;
      }
    }
    return reports;
  }

 private:
  int fd_ = -1;
};

// Nodes bound now; every render node made usable by an unprivileged user (as a udev rule
// giving the render group or everyone access would).
inline std::vector<hostrt::detail::EduNode> nodes_open_to_all() {
  // The guest's initramfs root may be 0700 (a mktemp directory): an unprivileged user could
  // not even reach /dev. A real system has 0755 there.
  for (const char* d : {"/", "/dev", "/dev/dri"}) {
    struct stat sb {};
    if (stat(d, &sb) == 0 && (sb.st_mode & 0005) != 0005) chmod(d, (sb.st_mode & 07777) | 0755);
  }
  auto nodes = hostrt::detail::bound_edu_nodes();
  for (auto& n : nodes)
    if (!n.render.empty()) chmod(n.render.c_str(), 0666);
  return nodes;
}

// Waits (guest time) until the system-wide pin counter returns to baseline.
inline int64_t settle_pins(int64_t baseline, double timeout_s = 180) {
  const double end = now_s() + timeout_s;
  int64_t p = pins_outstanding();
  while (p != baseline && now_s() < end) {
    usleep(100000);
    p = pins_outstanding();
  }
  return p - baseline;
}

// Clients the driver still accounts (debugfs "pins": one line per client), minus the header.
inline std::vector<std::string> debugfs_clients(const hostrt::detail::EduNode& n) {
  std::vector<std::string> out;
  auto text = hostrt::detail::read_text(n.debugfs + "/pins");
  if (!text) return out;
  size_t at = 0;
  bool header = true;
  while (at < text->size()) {
    size_t e = text->find('\n', at);
    if (e == std::string::npos) e = text->size();
    std::string line = text->substr(at, e - at);
    at = e + 1;
    if (header) {
      header = false;
      continue;
    }
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Clients still accounted on any node after waiting (BOs of closed files may be freed late,
// when their last job ends): empty when everything was released.
inline std::vector<std::string> settle_clients(const std::vector<hostrt::detail::EduNode>& nodes,
                                               double timeout_s = 120) {
  const double end = now_s() + timeout_s;
  for (;;) {
    std::vector<std::string> left;
    for (auto& n : nodes)
      for (auto& l : debugfs_clients(n)) left.push_back(n.debugfs + ": " + l);
    if (left.empty() || now_s() > end) return left;
    usleep(100000);
  }
}

inline uint64_t status_kb(const char* key) {  // e.g. "VmPin:" of /proc/self/status
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return ~0ull;
  char line[256];
  uint64_t v = ~0ull;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, strlen(key)) == 0) v = strtoull(line + strlen(key), nullptr, 10);
  fclose(f);
  return v;
}

// A BO_CREATE buffer mapped into the process.
struct Mapped {
  uint32_t handle = 0;
  uint8_t* p = nullptr;
  size_t size = 0;
};

inline int mapped_bo(int fd, size_t size, Mapped* m) {
  uint64_t off = 0;
  int err = bo_create(fd, size, &m->handle, &off);
  if (err) return err;
  m->size = (size + kPage - 1) & ~(kPage - 1);
  void* p = mmap(nullptr, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(off));
  if (p == MAP_FAILED) {
    err = errno;
    gem_close(fd, m->handle);
    return err;
  }
  m->p = static_cast<uint8_t*>(p);
  return 0;
}

inline void unmap_bo(int fd, Mapped& m) {
  if (m.p) munmap(m.p, m.size);
  if (m.handle) gem_close(fd, m.handle);
  m = {};
}

inline int wait_syncobj(int fd, uint32_t h, double seconds) {
  return drmSyncobjWait(fd, &h, 1, abs_ns(seconds), DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, nullptr) == 0 ? 0
                                                                                                   : errno;
}

// A fresh copy through the device on an open file, verified byte by byte: H2D+D2H chunks in
// one job (so no other client's job can land between them) or one H2H. Adds to
// bytes_verified / corrupted; returns 0, an errno of the failing call, or -1 on corruption.
inline int verified_copy_fd(int fd, Rng& rng, size_t size, bool h2h) {
  drm_edu_accel_queue_create q;
  int err = queue_create(fd, &q);
  if (err) return err;
  Mapped src, dst;
  uint32_t done = 0;
  int rc = 0;
  if ((err = mapped_bo(fd, size, &src)) || (err = mapped_bo(fd, size, &dst)) ||
      (err = drmSyncobjCreate(fd, 0, &done) ? errno : 0)) {
    rc = err;
  } else {
    rng.fill(src.p, size);
    memset(dst.p, 0xa5, size);
    std::vector<drm_edu_accel_copy_op> ops;
    if (h2h) {
      ops.push_back(op(DRM_EDU_ACCEL_OP_H2H, src.handle, 0, dst.handle, 0, size));
    } else {
      for (size_t at = 0; at < size && ops.size() + 2 <= 64; at += kChunk) {
        const size_t n = std::min<size_t>(kChunk, size - at);
        ops.push_back(op(DRM_EDU_ACCEL_OP_H2D, src.handle, at, 0, 0, n));
        ops.push_back(op(DRM_EDU_ACCEL_OP_D2H, 0, 0, dst.handle, at, n));
      }
    }
    drm_edu_accel_sync out = sync_point(done);
    err = submit(fd, q.queue, ops.data(), static_cast<uint32_t>(ops.size()), nullptr, 0, &out, 1);
    if (!err) err = wait_syncobj(fd, done, 600);
    if (err) {
      rc = err;
    } else {
      uint64_t bad = 0;
      for (size_t i = 0; i < size; ++i) bad += src.p[i] != dst.p[i];
      shared()->bytes_verified += size - bad;
      shared()->corrupted += bad;
      rc = bad ? -1 : 0;
    }
  }
  if (done) drmSyncobjDestroy(fd, done);
  unmap_bo(fd, src);
  unmap_bo(fd, dst);
  queue_destroy(fd, q.queue);
  return rc;
}

// The same in a fresh unprivileged process on a fresh file: the "does it still work" check.
inline int verified_copy_as_user(const std::string& render, uint64_t seed, size_t size, bool h2h) {
  return run_child(
      [&] {
        if (!drop_to(kUidA, 64 << 20)) return 90;
        Fd f(render);
        if (f.get() < 0) return 91;
        Rng rng(seed);
        int rc = verified_copy_fd(f.get(), rng, size, h2h);
        if (rc)
          logf("  verified copy on %s (%zu bytes, %s): %s", render.c_str(), size, h2h ? "H2H" : "H2D+D2H",
               rc < 0 ? "bytes differ" : strerror(rc));
        return rc ? 1 : 0;
      },
      900);
}

}  // namespace stress
