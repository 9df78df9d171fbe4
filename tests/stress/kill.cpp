// Part "kill": a storm of unprivileged processes SIGKILLed at random points while they pin
// large ranges, submit, or wait for DMA in flight. Afterwards every pin and RLIMIT_MEMLOCK
// charge is back at baseline and a survivor's accounting did not move.
#include "stress.hpp"

namespace stress {
namespace {

enum Phase { kSetup = 0, kPinning = 1, kSubmitting = 2, kDma = 3 };

[[noreturn]] void victim(const std::string& render, int slot, uint64_t seed, bool no_overlap) {
  auto& ph = shared()->phase[slot];
  ph = kSetup;
  if (!drop_to(kUidA, 256ull << 20)) _exit(90);
  Rng r(seed);
  Fd f(render);
  const int fd = f.get();
  if (fd < 0) _exit(91);
  const int scenario = static_cast<int>(r.below(3));
  if (scenario == 0) {
    // Pinning: large untouched ranges, so BO_USERPTR faults every page in while pinning.
    const size_t size = (r.range(4, 48) << 20) + r.below(kPage);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < 1000; ++i) {
      ph = kPinning;
      uint32_t h = 0;
      const size_t off = r.below(size / 2);
      // Keeping some registrations while making overlapping ones: what DMA-API debugging flags
      // today (--known-bug dma_api_overlapping_userptr closes each one first).
      if (bo_userptr(fd, static_cast<uint8_t*>(p) + off, size - off, 0, &h) == 0 &&
          (no_overlap || r.chance(0.7)))
        gem_close(fd, h);
    }
  } else {
    // Submitting, and waiting for DMA in flight: H2H jobs between a userptr and a created BO.
    const size_t size = r.range(64, 1024) << 10;
    std::vector<uint8_t> mem(size + 7);
    r.fill(mem.data(), mem.size());
    uint32_t src = 0, done = 0;
    Mapped dst;
    drm_edu_accel_queue_create q[4];
    ph = kPinning;
    if (bo_userptr(fd, mem.data() + 7, size, 0, &src) || mapped_bo(fd, size, &dst) ||
        drmSyncobjCreate(fd, 0, &done))
      _exit(92);
    for (auto& qq : q)
      if (queue_create(fd, &qq)) _exit(93);
    // Half the victims share their destination as a dma-buf (held by a second file too):
    // their jobs take the implicit-sync path, and they die holding the dma-buf.
    Fd other(render);
    int shared_fd = -1;
    uint32_t imported = 0;
    if (r.chance(0.5) && (drmPrimeHandleToFD(fd, dst.handle, DRM_CLOEXEC | DRM_RDWR, &shared_fd) ||
                          drmPrimeFDToHandle(other.get(), shared_fd, &imported)))
      _exit(95);
    for (int i = 0; i < 100000; ++i) {
      ph = kSubmitting;
      const uint64_t n = scenario == 1 ? r.range(1, 65536) : size;
      auto o = op(DRM_EDU_ACCEL_OP_H2H, src, r.below(size - n + 1), dst.handle, r.below(size - n + 1), n);
      drm_edu_accel_sync out = sync_point(done);
      if (submit(fd, q[r.below(4)].queue, &o, 1, nullptr, 0, &out, 1)) _exit(94);
      if (scenario == 2 || i % 16 == 15) {
        ph = kDma;
        wait_syncobj(fd, done, 600);
      }
    }
  }
  pause();
  _exit(0);
}

}  // namespace

int kill_part(const Params& P, Part& part) {
  auto nodes = nodes_open_to_all();
  if (nodes.empty()) return part.fail("no edu_accel device bound");
  const int total = P.long_run ? 120 : 20, parallel = 4;
  const int64_t pins0 = pins_outstanding();
  Rng r(P.seed, 2);

  // A survivor of the same user: its own pin and charge must not move while others die, and
  // once they are gone its whole limit is usable (the user's charge is back at baseline).
  int pipefd[2];
  if (pipe(pipefd)) return part.fail("pipe: %s", strerror(errno));
  fflush(nullptr);
  pid_t survivor = fork();
  if (survivor == 0) {
    close(pipefd[1]);
    if (!drop_to(kUidA, 16 << 20)) _exit(90);
    Fd f(nodes[0].render);
    // Page-aligned: exactly 256 pinned pages, which the parent waits for (below).
    void* mem = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint32_t h = 0;
    if (f.get() < 0 || mem == MAP_FAILED || bo_userptr(f.get(), mem, 1 << 20, 0, &h)) _exit(91);
    const uint64_t vmpin = status_kb("VmPin:"), charged = param(f.get(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES);
    char c;
    while (read(pipefd[0], &c, 1) > 0) {
    }
    const uint64_t vmpin2 = status_kb("VmPin:"), charged2 = param(f.get(), DRM_EDU_ACCEL_PARAM_PINNED_BYTES);
    if (vmpin != vmpin2 || charged != charged2) {
      logf("  survivor: VmPin %llu -> %llu kB, PINNED_BYTES %llu -> %llu",
           static_cast<unsigned long long>(vmpin), static_cast<unsigned long long>(vmpin2),
           static_cast<unsigned long long>(charged), static_cast<unsigned long long>(charged2));
      _exit(1);
    }
    gem_close(f.get(), h);
    // Its whole limit is available again: exactly 16 MiB pins, one more page does not.
    void* big = mmap(nullptr, (16 << 20) + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint32_t h2 = 0, h3 = 0;
    if (bo_userptr(f.get(), big, 16 << 20, 0, &h2) != 0) _exit(2);
    if (bo_userptr(f.get(), static_cast<uint8_t*>(big) + (16 << 20), kPage, 0, &h3) != ENOMEM) _exit(3);
    _exit(0);
  }
  close(pipefd[0]);

  struct Slot {
    pid_t pid = 0;
    double kill_at = 0;
  } slots[parallel];
  int started = 0, reaped = 0;
  uint64_t killed = 0, exited_early = 0, in_phase[4] = {};
  while (reaped < total) {
    for (int s = 0; s < parallel; ++s) {
      Slot& sl = slots[s];
      if (sl.pid && now_s() >= sl.kill_at) {
        const int ph = shared()->phase[s].load();
        kill(sl.pid, SIGKILL);
        int status = 0;
        waitpid(sl.pid, &status, 0);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
          ++killed;
          ++in_phase[ph & 3];
        } else {
          ++exited_early;
          logf("  kill: victim %d exited %d before its kill (phase %d)", sl.pid, WEXITSTATUS(status), ph);
        }
        sl.pid = 0;
        ++reaped;
      }
      if (!sl.pid && started < total) {
        const uint64_t vseed = mix(P.seed ^ mix(5000 + started));
        const std::string render = nodes[started % nodes.size()].render;
        shared()->phase[s] = kSetup;
        fflush(nullptr);
        pid_t pid = fork();
        if (pid == 0) victim(render, s, vseed, P.known_bugs.count("dma_api_overlapping_userptr") > 0);
        sl.pid = pid;
        // Random points: from before the file is open to deep into DMA.
        sl.kill_at = now_s() + static_cast<double>(r.range(0, 400)) / 1000.0;
        ++started;
      }
    }
    usleep(2000);
  }
  // The memlock budget is the user's (the driver charges user->locked_vm): the survivor's
  // limit is whole again only once the victims' BOs, which their last jobs may still hold,
  // are gone. Their pins go in the same step, so wait for the survivor's 1 MiB alone.
  if (const int64_t left = settle_pins(pins0 + static_cast<int64_t>((1 << 20) / kPage)))
    logf("  kill: %lld pinned pages beyond the survivor's still held after the storm",
         static_cast<long long>(left));
  close(pipefd[1]);
  int st = 0;
  waitpid(survivor, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st))
    part.fail("the survivor's pin accounting moved or its limit is not whole again (exit %d)",
              WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  if (exited_early > 3)
    part.fail("%llu victims exited by themselves (setup failed?)",
              static_cast<unsigned long long>(exited_early));
  check_released(part, nodes, pins0, "the storm");
  for (size_t i = 0; i < nodes.size(); ++i)
    if (verified_copy_as_user(nodes[i].render, mix(P.seed + 31 + i), 2 * kChunk, false))
      part.fail("verified copy on %s failed after the storm", nodes[i].render.c_str());
  shared()->killed += killed;
  part.figure("processes_killed", killed);
  logf("kill: %llu killed (setup %llu, pinning %llu, submitting %llu, DMA wait %llu)",
       static_cast<unsigned long long>(killed), static_cast<unsigned long long>(in_phase[0]),
       static_cast<unsigned long long>(in_phase[1]), static_cast<unsigned long long>(in_phase[2]),
       static_cast<unsigned long long>(in_phase[3]));
  return 0;
}

}  // namespace stress
