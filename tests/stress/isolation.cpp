// Part "isolation": user A (uid 1000) owns BOs, a queue, a syncobj and bytes in edu's device
// buffer; user B (uid 1001, its own file) tries to use each of them. Debugfs (which shows
// physical and DMA addresses) must stay root-only.
#include "stress.hpp"

namespace stress {
namespace {

struct AState {  // what A publishes to B (in the shared page below)
  uint32_t bo, ubo, queue, syncobj;
  uint64_t bo_offset, completion_offset;
  uint8_t secret[kChunk];
  std::atomic<int> stage;  // 1: A ready, 2: B done, 3: A checked its objects still work
  std::atomic<int> a_rc, b_rc;
};

}  // namespace

int isolation_part(const Params& P, Part& part) {
  auto nodes = nodes_open_to_all();
  if (nodes.empty()) return part.fail("no edu_accel device bound");
  const auto& node = nodes[0];
  void* mem = mmap(nullptr, sizeof(AState), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  auto* a = new (mem) AState();
  Rng(P.seed, 3).fill(a->secret, kChunk);

  fflush(nullptr);
  pid_t pa = fork();
  if (pa == 0) {
    if (!drop_to(kUidA, 16 << 20)) _exit(90);
    Fd f(node.render);
    const int fd = f.get();
    Mapped bo;
    std::vector<uint8_t> umem(3 * kPage, 7);
    drm_edu_accel_queue_create q;
    uint32_t done = 0;
    if (fd < 0 || mapped_bo(fd, kChunk, &bo) || bo_userptr(fd, umem.data(), umem.size(), 0, &a->ubo) ||
        queue_create(fd, &q) || drmSyncobjCreate(fd, 0, &done))
      _exit(91);
    memcpy(bo.p, a->secret, kChunk);
    drm_edu_accel_bo_info info;
    if (bo_info(fd, bo.handle, &info)) _exit(92);
    a->bo = bo.handle;
    a->bo_offset = info.mmap_offset;
    if (get_param(fd, DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET, &a->completion_offset)) _exit(93);
    a->queue = q.queue;
    a->syncobj = done;
    // The secret goes into the device buffer and stays there.
    auto o = op(DRM_EDU_ACCEL_OP_H2D, bo.handle, 0, 0, 0, kChunk);
    drm_edu_accel_sync out = sync_point(done);
    if (submit(fd, q.queue, &o, 1, nullptr, 0, &out, 1) || wait_syncobj(fd, done, 600)) _exit(94);
    a->stage = 1;
    while (a->stage.load() < 2) usleep(10000);
    // B's attempts must not have touched A's objects: the queue, BO and syncobj still work.
    Rng rng(P.seed, 33);
    int rc = verified_copy_fd(fd, rng, 5000, true);
    auto o2 = op(DRM_EDU_ACCEL_OP_H2H, bo.handle, 0, a->ubo, 0, 100);
    if (!rc) rc = submit(fd, q.queue, &o2, 1, nullptr, 0, &out, 1);
    if (!rc) rc = wait_syncobj(fd, done, 600);
    if (!rc && memcmp(umem.data(), a->secret, 100)) rc = -1;
    a->a_rc = rc;
    a->stage = 3;
    _exit(rc ? 1 : 0);
  }
  for (int i = 0; i < 60000 && a->stage.load() < 1; ++i) {
    if (waitpid(pa, nullptr, WNOHANG) == pa) return part.fail("user A could not set up its objects");
    usleep(10000);
  }

  std::vector<std::string> findings;  // B's successes: each an isolation hole
  int leaked_bytes = -1;
  fflush(nullptr);
  pid_t pb = fork();
  if (pb == 0) {
    if (!drop_to(kUidB, 16 << 20)) _exit(90);
    int bad = 0;
    auto hole = [&](const char* what, int err) {
      if (err == 0) {
        logf("  isolation hole: user B %s", what);
        ++bad;
      }
    };
    Fd f(node.render);
    const int fd = f.get();
    if (fd < 0) _exit(91);
    drm_edu_accel_bo_info info;
    hole("reads BO_INFO of A's handle", bo_info(fd, a->bo, &info));
    hole("closes A's handle", gem_close(fd, a->ubo));
    // mmap offsets are device-wide: another file's offset on B's own fd must be refused.
    for (uint64_t off : {a->bo_offset, a->completion_offset}) {
      void* p = mmap(nullptr, kPage, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(off));
      if (p != MAP_FAILED) {
        logf("  isolation hole: user B maps A's mmap offset 0x%llx (first byte %02x)",
             static_cast<unsigned long long>(off), *static_cast<uint8_t*>(p));
        ++bad;
        munmap(p, kPage);
      }
    }
    // A's queue id, syncobj and handles, with B owning nothing yet.
    auto o = op(DRM_EDU_ACCEL_OP_H2D, a->bo, 0, 0, 0, 16);
    hole("submits to A's queue id with A's BO", submit(fd, a->queue, &o, 1, nullptr, 0, nullptr, 0));
    hole("destroys A's queue id", queue_destroy(fd, a->queue));
    uint32_t h = a->syncobj;
    hole("waits on A's syncobj handle",
         drmSyncobjWait(fd, &h, 1, abs_ns(1), DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, nullptr) ? errno : 0);
    // Now B owns a queue and a BO: A's handles named in B's own submissions.
    drm_edu_accel_queue_create q;
    Mapped mine;
    uint32_t done = 0;
    if (queue_create(fd, &q) || mapped_bo(fd, kChunk, &mine) || drmSyncobjCreate(fd, 0, &done)) _exit(92);
    auto steal = op(DRM_EDU_ACCEL_OP_H2H, a->bo + (a->bo == mine.handle ? 1000 : 0), 0, mine.handle, 0, 64);
    if (a->bo != mine.handle)
      hole("copies from A's handle number", submit(fd, q.queue, &steal, 1, nullptr, 0, nullptr, 0));
    drm_edu_accel_sync in = sync_point(a->syncobj + (a->syncobj == done ? 1000 : 0));
    auto ok = op(DRM_EDU_ACCEL_OP_H2D, mine.handle, 0, 0, 0, 1);
    hole("uses A's syncobj handle as an in-sync", submit(fd, q.queue, &ok, 1, &in, 1, nullptr, 0));
    // Device memory: the bytes A left in edu's buffer must not be readable by B.
    memset(mine.p, 0, kChunk);
    auto rd = op(DRM_EDU_ACCEL_OP_D2H, 0, 0, mine.handle, 0, kChunk);
    drm_edu_accel_sync out = sync_point(done);
    int same = -1;
    if (submit(fd, q.queue, &rd, 1, nullptr, 0, &out, 1) == 0 && wait_syncobj(fd, done, 600) == 0) {
      same = 0;
      for (uint32_t i = 0; i < kChunk; ++i) same += mine.p[i] == a->secret[i];
    }
    a->b_rc = same;
    // Debugfs shows physical and DMA addresses: root only.
    for (const char* file : {"bos", "pins", "state", "queues"}) {
      std::string path = node.debugfs + "/" + file;
      int dfd = open(path.c_str(), O_RDONLY);
      char buf[64];
      if (dfd >= 0 && read(dfd, buf, sizeof buf) > 0) {
        logf("  isolation hole: user B reads %s", path.c_str());
        ++bad;
      }
      if (dfd >= 0) close(dfd);
    }
    a->stage = 2;
    _exit(bad > 100 ? 100 : bad);
  }
  int st = 0;
  const int rb = [&] {
    for (int i = 0; i < 60000; ++i) {
      if (waitpid(pb, &st, WNOHANG) == pb) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      usleep(10000);
    }
    kill(pb, SIGKILL);
    return -1;
  }();
  a->stage = std::max(a->stage.load(), 2);
  leaked_bytes = a->b_rc.load();
  waitpid(pa, &st, 0);
  const int ra = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (rb)
    part.fail("user B used %d of user A's objects or read root-only debugfs (see the holes above; exit %d)",
              rb, rb);
  if (ra)
    part.fail("user A's objects stopped working after user B's attempts (exit %d, rc %d)", ra,
              a->a_rc.load());
  if (leaked_bytes < 0) logf("  isolation: user B's D2H of the device buffer was refused");
  part.check_known(leaked_bytes < static_cast<int>(kChunk) / 8, "device_buffer_isolation",
                   "user B read back %d of the %u bytes user A left in edu's device buffer (D2H offset 0)",
                   leaked_bytes, kChunk);
  part.figure("isolation_checks", 14);
  return 0;
}

}  // namespace stress
