// Part "smp": several unprivileged processes x streams (one queue and thread each) x BO
// churn, for a bounded time, every byte verified: H2H jobs and H2D+D2H pairs inside one job
// (so no other client's job can run between them), between created and userptr BOs that are
// replaced as they go. Meant for the smp2 configuration (two vCPUs, real DMA timing).
#include <thread>

#include "stress.hpp"

namespace stress {
namespace {

struct Buf {
  uint32_t handle = 0;
  uint8_t* p = nullptr;
  size_t size = 0;
  std::vector<uint8_t> heap;  // userptr backing
  bool created = false;
};

int make_buf(int fd, Rng& r, Buf& b) {
  b = Buf();
  b.size = r.range(1, 3 * kChunk);
  if (r.chance(0.5)) {
    Mapped m;
    int err = mapped_bo(fd, b.size, &m);
    if (err) return err;
    b.handle = m.handle;
    b.p = m.p;
    b.created = true;
    b.size = m.size;
    return 0;
  }
  b.heap.resize(b.size + 64);
  b.p = b.heap.data() + r.below(64);
  return bo_userptr(fd, b.p, b.size, 0, &b.handle);
}

void free_buf(int fd, Buf& b) {
  if (b.created) munmap(b.p, b.size);
  if (b.handle) gem_close(fd, b.handle);
  b = Buf();
}

int stream(int fd, uint64_t seed, double until, int max_jobs, std::atomic<int>* jobs) {
  Rng r(seed);
  drm_edu_accel_queue_create q;
  uint32_t done = 0;
  if (queue_create(fd, &q) || drmSyncobjCreate(fd, 0, &done)) return 1;
  Buf a, b;
  if (make_buf(fd, r, a) || make_buf(fd, r, b)) return 2;
  for (int j = 0; j < max_jobs && now_s() < until; ++j) {
    if (r.chance(0.3)) {
      free_buf(fd, r.chance(0.5) ? a : b);
      if ((!a.handle && make_buf(fd, r, a)) || (!b.handle && make_buf(fd, r, b))) return 3;
    }
    Buf& s = r.chance(0.5) ? a : b;
    Buf& d = &s == &a ? b : a;
    r.fill(s.p, s.size);
    memset(d.p, 0xc3, d.size);
    const uint64_t so = r.below(s.size), dof = r.below(d.size);
    uint64_t n = std::min(s.size - so, d.size - dof);
    std::vector<drm_edu_accel_copy_op> ops;
    if (r.chance(0.5)) {
      n = r.range(1, n);
      ops.push_back(op(DRM_EDU_ACCEL_OP_H2H, s.handle, so, d.handle, dof, n));
    } else {
      n = r.range(1, std::min<uint64_t>(n, kChunk));
      const uint64_t dev = r.below(kChunk - n + 1);
      ops.push_back(op(DRM_EDU_ACCEL_OP_H2D, s.handle, so, 0, dev, n));
      ops.push_back(op(DRM_EDU_ACCEL_OP_D2H, 0, dev, d.handle, dof, n));
    }
    drm_edu_accel_sync out = sync_point(done);
    int err = submit(fd, q.queue, ops.data(), static_cast<uint32_t>(ops.size()), nullptr, 0, &out, 1);
    if (!err) err = wait_syncobj(fd, done, 600);
    if (err) {
      logf("  smp stream: %s", strerror(err));
      return 4;
    }
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; ++i) bad += d.p[dof + i] != s.p[so + i];
    for (uint64_t i = 0; i < d.size; ++i)
      if (i < dof || i >= dof + n) bad += d.p[i] != 0xc3;  // nothing written outside the range
    shared()->bytes_verified += n;
    shared()->corrupted += bad;
    if (bad)
      logf("  smp stream: %llu corrupted bytes in a %llu-byte copy", static_cast<unsigned long long>(bad),
           static_cast<unsigned long long>(n));
    (*jobs)++;
  }
  free_buf(fd, a);
  free_buf(fd, b);
  return 0;
}

}  // namespace

int smp_part(const Params& P, Part& part) {
  auto nodes = nodes_open_to_all();
  if (nodes.empty()) return part.fail("no edu_accel device bound");
  const bool slow = env_is("VM_ICOUNT", "off");  // each DMA 100 ms of real time
  const int procs = 3, streams = 2;
  const double seconds = P.long_run ? 150 : (slow ? 25 : 15);
  const int max_jobs = slow ? 1000 : (P.long_run ? 400 : 60);
  const int64_t pins0 = pins_outstanding();
  const uint64_t v0 = shared()->bytes_verified.load(), c0 = shared()->corrupted.load();
  auto* jobs = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  logf("smp: %d processes x %d streams, up to %.0f s, %ld CPU(s) online", procs, streams, seconds,
       sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<pid_t> pids;
  const double until = now_s() + seconds;
  for (int p = 0; p < procs; ++p) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      if (!drop_to(kUidA, 64 << 20)) _exit(90);
      Fd f(nodes[p % nodes.size()].render);
      std::vector<std::thread> ts;
      std::atomic<int> bad{0};
      for (int s = 0; s < streams; ++s)
        ts.emplace_back([&, s] {
          if (stream(f.get(), mix(P.seed ^ mix(7000 + p * 16 + s)), until, max_jobs, jobs)) bad++;
        });
      for (auto& t : ts) t.join();
      _exit(bad.load() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  if (int bad = wait_children(pids, seconds + 1200, "smp")) part.fail("%d SMP process(es) failed", bad);
  const uint64_t corrupted = shared()->corrupted.load() - c0;
  if (corrupted) part.fail("%llu corrupted bytes", static_cast<unsigned long long>(corrupted));
  const int64_t leaked = settle_pins(pins0);
  part.leaked_pins += leaked;
  if (leaked) part.fail("%lld pinned pages not released", static_cast<long long>(leaked));
  if (jobs->load() == 0) part.fail("no job completed");
  logf("smp: %d jobs, %llu bytes verified", jobs->load(),
       static_cast<unsigned long long>(shared()->bytes_verified.load() - v0));
  part.figure("smp_jobs", static_cast<uint64_t>(jobs->load()));
  return 0;
}

}  // namespace stress
