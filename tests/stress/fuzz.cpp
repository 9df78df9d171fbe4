// Part "fuzz": a structure-aware ioctl fuzzer. Several unprivileged processes, each with two
// files (one per edu device when there are two) and several threads that build valid
// structures from what the process owns, mutate one field (or none), and race
// close/reopen, QUEUE_DESTROY, GEM_CLOSE, munmap and MADV_DONTNEED against each other.
#include <setjmp.h>

#include <cstddef>
#include <thread>

#include "stress.hpp"

namespace stress {
namespace {

struct Field {
  size_t off, size;
};
#define FLD(T, f) \
  Field { offsetof(T, f), sizeof(T::f) }

uint64_t interesting(Rng& r, size_t size) {
  static const uint64_t k64[] = {0,
                                 1,
                                 2,
                                 63,
                                 64,
                                 4094,
                                 4095,
                                 4096,
                                 4097,
                                 8191,
                                 0x40000,
                                 0x41000,
                                 1ull << 31,
                                 1ull << 32,
                                 (1ull << 32) - 1,
                                 1ull << 63,
                                 ~0ull,
                                 ~0ull - 4094,
                                 ~0ull - 4095,
                                 0xffffffff81000000ull,
                                 0x7ffffffff000ull};
  static const uint64_t k32[] = {0,  1,  2,  3,  4,          7,          15,        16,
                                 17, 63, 64, 65, 0x7fffffff, 0x80000000, 0xffffffff};
  switch (r.below(4)) {
    case 0:
      return r.next() >> (size == 4 ? 32 : 0);
    case 1:
      return r.below(128);
    default:
      return size == 8 ? k64[r.below(std::size(k64))] : k32[r.below(std::size(k32))];
  }
}

void mutate(void* s, const Field* f, size_t nf, Rng& r) {
  const Field& fl = f[r.below(nf)];
  uint64_t v = interesting(r, fl.size);
  memcpy(static_cast<char*>(s) + fl.off, &v, fl.size);  // little endian: low bytes
}

constexpr int kSlots = 32;

struct Map {
  std::atomic<void*> p{nullptr};
  std::atomic<size_t> n{0};  // bit 0: writable
};

// What one fuzzing process owns; its threads share it, racing.
struct State {
  std::string render[2];
  std::atomic<int> fds[2];
  std::atomic<uint64_t> handles[2][kSlots];  // handle | size << 32 (stale ones stay)
  std::atomic<uint64_t> offsets[kSlots];     // mmap offsets of either file
  std::atomic<uint32_t> queues[2][16];
  std::atomic<uint32_t> syncs[2][16];
  std::atomic<int> dmabufs[8];  // exported dma-buf fds, -1 when empty
  Map maps[kSlots];
  uint8_t* arena = nullptr;
  size_t arena_size = 0;
  std::atomic<int> bad{0};
  bool fresh_userptr = false;  // --known-bug dma_api_overlapping_userptr
};

void* const kBusy = reinterpret_cast<void*>(1);

thread_local sigjmp_buf* volatile t_jmp = nullptr;
uint8_t* g_arena = nullptr;
size_t g_arena_size = 0;
thread_local void* volatile t_fault_addr = nullptr;
thread_local volatile int t_fault_code = 0;

void on_sigbus(int sig, siginfo_t* si, void*) {
  if (t_jmp) {
    t_fault_addr = si->si_addr;
    t_fault_code = si->si_code;
    siglongjmp(*t_jmp, sig);
  }
  char b[160];
  int n = snprintf(b, sizeof b, "  fuzz: unguarded signal %d at address %p (code %d, pid %d)\n", sig,
                   si->si_addr, si->si_code, getpid());
  if (write(2, b, static_cast<size_t>(n)) < 0) {
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

// Reads (and writes, if writable) the first byte of a mapping; SIGBUS/SIGSEGV counted, and
// the first few logged with what /proc/self/maps says is at the address now.
void touch(void* p, bool writable, bool after_dontneed = false) {
  sigjmp_buf jb;
  const int sig = sigsetjmp(jb, 1);
  if (sig == 0) {
    t_jmp = &jb;
    volatile uint8_t* b = static_cast<volatile uint8_t*>(p);
    uint8_t x = b[0];
    if (writable) b[0] = x;
  } else {
    const uint64_t n = (after_dontneed ? shared()->sigbus : shared()->sigbus_other)++;
    if (n < 3) {
      const auto at = reinterpret_cast<uintptr_t>(t_fault_addr);
      std::string now = "unmapped";
      if (FILE* f = fopen("/proc/self/maps", "r")) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
          unsigned long lo = 0, hi = 0;
          if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi) {
            now = line;
            if (!now.empty() && now.back() == '\n') now.pop_back();
            break;
          }
        }
        fclose(f);
      }
      logf("  fuzz: signal %d (code %d) at %p touching %s mapping %p; there now: %s; arena %p+%#zx", sig,
           t_fault_code, t_fault_addr, after_dontneed ? "a DONTNEED'd" : "a fresh", p, now.c_str(),
           static_cast<void*>(g_arena), g_arena_size);
    }
  }
  t_jmp = nullptr;
}

template <typename T>
int fz(int fd, unsigned long req, T* arg) {
  int rc = ioctl(fd, req, arg) == 0 ? 0 : errno;
  shared()->ioctls++;
  note_errno(rc);
  return rc;
}

class Worker {
 public:
  Worker(State& s, uint64_t seed) : s_(s), r_(seed) {}

  void run(int iters) {
    for (int i = 0; i < iters; ++i) step();
  }

 private:
  State& s_;
  Rng r_;
  drm_edu_accel_copy_op ops_[80];
  drm_edu_accel_sync syncs_[24];

  bool mutating() { return r_.chance(0.55); }

  uint32_t handle(int w) {
    switch (r_.below(10)) {
      case 0:
        return static_cast<uint32_t>(interesting(r_, 4));
      case 1:
        return static_cast<uint32_t>(s_.handles[1 - w][r_.below(kSlots)].load());  // other file's
      default:
        return static_cast<uint32_t>(s_.handles[w][r_.below(kSlots)].load());
    }
  }
  // A handle of this file with its size, or {0,0}.
  std::pair<uint32_t, uint64_t> owned(int w) {
    for (int tries = 0; tries < 4; ++tries) {
      uint64_t v = s_.handles[w][r_.below(kSlots)].load();
      if (v) return {static_cast<uint32_t>(v), v >> 32};
    }
    return {0, 0};
  }
  void remember(int w, uint32_t h, uint64_t size) { s_.handles[w][r_.below(kSlots)] = h | (size << 32); }
  uint32_t queue(int w) {
    if (r_.chance(0.1)) return static_cast<uint32_t>(interesting(r_, 4));
    return s_.queues[r_.chance(0.1) ? 1 - w : w][r_.below(16)].load();
  }
  uint32_t syncobj(int w) {
    if (r_.chance(0.1)) return static_cast<uint32_t>(interesting(r_, 4));
    return s_.syncs[r_.chance(0.2) ? 1 - w : w][r_.below(16)].load();
  }

  void keep_map(void* p, size_t n) {
    Map& m = s_.maps[r_.below(kSlots)];
    void* expect = nullptr;
    if (!m.p.compare_exchange_strong(expect, kBusy)) {
      munmap(p, n & ~size_t{1});
      return;
    }
    m.n = n;
    m.p = p;
  }
  // Takes a mapping out of the shared table (only its taker touches or unmaps it).
  std::pair<void*, size_t> take_map() {
    Map& m = s_.maps[r_.below(kSlots)];
    void* p = m.p.load();
    if (!p || p == kBusy || !m.p.compare_exchange_strong(p, kBusy)) return {nullptr, 0};
    size_t n = m.n.load();
    m.p = nullptr;
    return {p, n};
  }

  void step() {
    const int w = static_cast<int>(r_.below(2));
    const int fd = s_.fds[w].load();
    const uint64_t dice = r_.below(100);
    if (dice < 4)
      get_param(fd);
    else if (dice < 14)
      bo_create(fd, w);
    else if (dice < 24)
      bo_userptr(fd, w);
    else if (dice < 29)
      bo_info(fd, w);
    else if (dice < 36)
      gem_close_(fd, w);
    else if (dice < 42)
      queue_create_(fd, w);
    else if (dice < 46)
      queue_destroy_(fd, w);
    else if (dice < 68)
      submit_(fd, w);
    else if (dice < 73)
      syncobj_ops(fd, w);
    else if (dice < 80)
      mmap_offset(fd);
    else if (dice < 86)
      unmap_or_dontneed();
    else if (dice < 90)
      arena_remap();
    else if (dice < 92)
      reopen(w);
    else if (dice < 97)
      prime(fd, w);
    else
      get_param(fd);
  }

  // PRIME: exports (mutated flags), imports of our own and the other file's or device's
  // exports and of fds that are no dma-buf, mmaps of dma-bufs, BO_WAIT, and fds closed while
  // other threads import them.
  void prime(int fd, int w) {
    std::atomic<int>& slot = s_.dmabufs[r_.below(std::size(s_.dmabufs))];
    switch (r_.below(5)) {
      case 0: {
        drm_prime_handle e{};
        e.handle = handle(w);
        e.flags = DRM_CLOEXEC | (r_.chance(0.5) ? DRM_RDWR : 0);
        if (mutating()) e.flags = static_cast<uint32_t>(interesting(r_, 4));
        if (fz(fd, DRM_IOCTL_PRIME_HANDLE_TO_FD, &e) == 0) {
          const int old = slot.exchange(e.fd);
          if (old >= 0) close(old);
        }
        break;
      }
      case 1: {
        drm_prime_handle i{};
        const int64_t pick = r_.below(10);
        i.fd = pick == 0 ? fd : pick == 1 ? static_cast<int>(interesting(r_, 4)) : slot.load();
        if (r_.chance(0.1)) i.flags = static_cast<uint32_t>(interesting(r_, 4));
        if (fz(fd, DRM_IOCTL_PRIME_FD_TO_HANDLE, &i) == 0) remember(w, i.handle, 0);
        break;
      }
      case 2: {
        const int b = slot.load();
        const size_t n = kPage * r_.range(1, 4);
        void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, r_.chance(0.1) ? MAP_PRIVATE : MAP_SHARED, b,
                       static_cast<off_t>(kPage * r_.below(2)));
        if (p == MAP_FAILED) return;
        touch(p, true);
        keep_map(p, n | 1);
        break;
      }
      case 3: {
        drm_edu_accel_bo_wait bw{};
        bw.handle = handle(w);
        bw.timeout_ns = r_.chance(0.5) ? 0 : abs_ns(0.02);
        static const Field f[] = {FLD(drm_edu_accel_bo_wait, handle), FLD(drm_edu_accel_bo_wait, flags),
                                  FLD(drm_edu_accel_bo_wait, timeout_ns)};
        if (mutating()) mutate(&bw, f, std::size(f), r_);
        if (bw.timeout_ns > abs_ns(0.05)) bw.timeout_ns = abs_ns(0.05);  // never a long sleep
        fz(fd, DRM_IOCTL_EDU_ACCEL_BO_WAIT, &bw);
        break;
      }
      default: {
        const int old = slot.exchange(-1);
        if (old >= 0) close(old);
      }
    }
  }

  void get_param(int fd) {
    drm_edu_accel_get_param p{};
    p.param = static_cast<uint32_t>(r_.below(12));
    static const Field f[] = {FLD(drm_edu_accel_get_param, param), FLD(drm_edu_accel_get_param, pad)};
    if (mutating()) mutate(&p, f, 2, r_);
    fz(fd, DRM_IOCTL_EDU_ACCEL_GET_PARAM, &p);
  }

  void bo_create(int fd, int w) {
    drm_edu_accel_bo_create a{};
    a.size = r_.chance(0.5) ? r_.range(1, 3 * kPage) : r_.range(1, 256 * 1024);
    static const Field f[] = {FLD(drm_edu_accel_bo_create, size), FLD(drm_edu_accel_bo_create, flags),
                              FLD(drm_edu_accel_bo_create, handle),
                              FLD(drm_edu_accel_bo_create, mmap_offset)};
    if (mutating()) {
      mutate(&a, f, 4, r_);
      if (a.size > (256u << 10) && a.size <= (1ull << 30)) a.size = 1ull << 31;  // never a huge valid BO
    }
    if (fz(fd, DRM_IOCTL_EDU_ACCEL_BO_CREATE, &a) == 0) {
      remember(w, a.handle, a.size);
      s_.offsets[r_.below(kSlots)] = a.mmap_offset;
      if (r_.chance(0.4)) {
        size_t n = (a.size + kPage - 1) & ~(kPage - 1);
        void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(a.mmap_offset));
        if (p != MAP_FAILED) {
          touch(p, true);
          keep_map(p, n | 1);
        }
      }
    }
  }

  void bo_userptr(int fd, int w) {
    drm_edu_accel_bo_userptr a{};
    const uint64_t size = r_.range(1, 512 * 1024);
    a.user_ptr = reinterpret_cast<uintptr_t>(s_.arena) + r_.below(s_.arena_size - size);
    a.size = size;
    a.flags = r_.chance(0.2) ? DRM_EDU_ACCEL_BO_USERPTR_READONLY : 0;
    static const Field f[] = {FLD(drm_edu_accel_bo_userptr, user_ptr), FLD(drm_edu_accel_bo_userptr, size),
                              FLD(drm_edu_accel_bo_userptr, flags), FLD(drm_edu_accel_bo_userptr, handle)};
    if (mutating()) {
      mutate(&a, f, 4, r_);
      if (a.size > (4u << 20) && a.size <= (1ull << 30)) a.size = 1ull << 31;
    }
    void* fresh = nullptr;
    if (s_.fresh_userptr && a.user_ptr >= reinterpret_cast<uintptr_t>(s_.arena) &&
        a.user_ptr < reinterpret_cast<uintptr_t>(s_.arena) + s_.arena_size && a.size <= s_.arena_size) {
      // Pages no other live registration can share (pinned pages outlive the munmap).
      fresh = mmap(nullptr, s_.arena_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (fresh != MAP_FAILED)
        a.user_ptr = a.user_ptr - reinterpret_cast<uintptr_t>(s_.arena) + reinterpret_cast<uintptr_t>(fresh);
    }
    if (fz(fd, DRM_IOCTL_EDU_ACCEL_BO_USERPTR, &a) == 0) remember(w, a.handle, a.size);
    if (fresh && fresh != MAP_FAILED) munmap(fresh, s_.arena_size);
  }

  void bo_info(int fd, int w) {
    drm_edu_accel_bo_info a{};
    a.handle = handle(w);
    static const Field f[] = {FLD(drm_edu_accel_bo_info, handle), FLD(drm_edu_accel_bo_info, flags),
                              FLD(drm_edu_accel_bo_info, size), FLD(drm_edu_accel_bo_info, dma_nents)};
    if (r_.chance(0.2)) mutate(&a, f, 4, r_);
    if (fz(fd, DRM_IOCTL_EDU_ACCEL_BO_INFO, &a) == 0 && a.mmap_offset)
      s_.offsets[r_.below(kSlots)] = a.mmap_offset;
  }

  void gem_close_(int fd, int w) {
    drm_gem_close c{};
    c.handle = handle(w);
    if (r_.chance(0.1)) c.pad = static_cast<uint32_t>(interesting(r_, 4));
    fz(fd, DRM_IOCTL_GEM_CLOSE, &c);
  }

  void queue_create_(int fd, int w) {
    drm_edu_accel_queue_create q{};
    q.priority = static_cast<uint32_t>(r_.below(4));  // HIGH: EACCES unprivileged
    static const Field f[] = {
        FLD(drm_edu_accel_queue_create, flags), FLD(drm_edu_accel_queue_create, priority),
        FLD(drm_edu_accel_queue_create, queue), FLD(drm_edu_accel_queue_create, completion_offset),
        FLD(drm_edu_accel_queue_create, reserved)};
    if (mutating()) mutate(&q, f, std::size(f), r_);
    if (fz(fd, DRM_IOCTL_EDU_ACCEL_QUEUE_CREATE, &q) == 0) {
      s_.queues[w][r_.below(16)] = q.queue;
      if (r_.chance(0.2)) {
        drm_edu_accel_get_param g{};
        g.param = DRM_EDU_ACCEL_PARAM_COMPLETION_MMAP_OFFSET;
        if (fz(fd, DRM_IOCTL_EDU_ACCEL_GET_PARAM, &g) == 0) {
          s_.offsets[r_.below(kSlots)] = g.value;
          const bool wr = r_.chance(0.3);  // a writable mapping of the completion page must fail
          void* p = mmap(nullptr, kPage, wr ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd,
                         static_cast<off_t>(g.value));
          if (p != MAP_FAILED) {
            touch(p, false);
            keep_map(p, kPage);
          }
        }
      }
    }
  }

  void queue_destroy_(int fd, int w) {
    drm_edu_accel_queue_destroy d{};
    d.queue = queue(w);
    if (r_.chance(0.1)) d.pad = static_cast<uint32_t>(interesting(r_, 4));
    fz(fd, DRM_IOCTL_EDU_ACCEL_QUEUE_DESTROY, &d);
  }

  // A valid op on owned BOs when there are some; device ranges always within 1..4095.
  drm_edu_accel_copy_op valid_op(int w) {
    auto [sh, ssz] = owned(w);
    auto [dh, dsz] = owned(w);
    const uint32_t type = static_cast<uint32_t>(r_.range(1, 3));
    drm_edu_accel_copy_op o{};
    o.type = type;
    if (type == DRM_EDU_ACCEL_OP_H2D && ssz) {
      o.src_handle = sh;
      o.src_offset = r_.below(ssz);
      o.size = r_.range(1, std::min<uint64_t>(kChunk, ssz - o.src_offset));
      o.dst_offset = r_.below(kChunk - o.size + 1);
    } else if (type == DRM_EDU_ACCEL_OP_D2H && dsz) {
      o.dst_handle = dh;
      o.dst_offset = r_.below(dsz);
      o.size = r_.range(1, std::min<uint64_t>(kChunk, dsz - o.dst_offset));
      o.src_offset = r_.below(kChunk - o.size + 1);
    } else if (ssz && dsz) {
      o.type = DRM_EDU_ACCEL_OP_H2H;
      o.src_handle = sh;
      o.dst_handle = dh;
      o.src_offset = r_.below(ssz);
      o.dst_offset = r_.below(dsz);
      o.size = r_.range(1, std::min<uint64_t>({16384, ssz - o.src_offset, dsz - o.dst_offset}));
    } else {
      o.type = DRM_EDU_ACCEL_OP_H2D;
      o.src_handle = sh;
      o.size = 1;
    }
    return o;
  }

  void submit_(int fd, int w) {
    const uint32_t nops = static_cast<uint32_t>(r_.range(1, 4));
    for (uint32_t i = 0; i < nops; ++i) ops_[i] = valid_op(w);
    const uint32_t nin = r_.chance(0.3) ? static_cast<uint32_t>(r_.range(1, 2)) : 0;
    const uint32_t nout = r_.chance(0.4) ? static_cast<uint32_t>(r_.range(1, 2)) : 0;
    for (uint32_t i = 0; i < nin + nout; ++i) syncs_[i] = sync_point(syncobj(w), 0);
    drm_edu_accel_submit s{};
    s.queue = queue(w);
    s.ops = DRM_EDU_ACCEL_OBJ_ARRAY(nops, ops_);
    s.in_syncs = DRM_EDU_ACCEL_OBJ_ARRAY(nin, syncs_);
    s.out_syncs = DRM_EDU_ACCEL_OBJ_ARRAY(nout, syncs_ + nin);
    if (mutating()) {
      const uint64_t where = r_.below(10);
      if (where < 4) {
        static const Field f[] = {FLD(drm_edu_accel_submit, queue),
                                  FLD(drm_edu_accel_submit, flags),
                                  FLD(drm_edu_accel_submit, ops.stride),
                                  FLD(drm_edu_accel_submit, ops.count),
                                  FLD(drm_edu_accel_submit, ops.array),
                                  FLD(drm_edu_accel_submit, in_syncs.stride),
                                  FLD(drm_edu_accel_submit, in_syncs.count),
                                  FLD(drm_edu_accel_submit, in_syncs.array),
                                  FLD(drm_edu_accel_submit, out_syncs.stride),
                                  FLD(drm_edu_accel_submit, out_syncs.count),
                                  FLD(drm_edu_accel_submit, out_syncs.array)};
        mutate(&s, f, std::size(f), r_);
        // Arrays past their buffers read this object's memory: keep them within the buffers
        // (a count just above the limit stays, to be refused).
        auto bound = [](drm_edu_accel_obj_array& a, size_t bytes, uint32_t over) {
          if (a.count > over && a.count < 100000) a.count = over;
          if (a.stride && a.stride <= 4096 && uint64_t{a.count} * a.stride > bytes)
            a.count = static_cast<uint32_t>(bytes / a.stride);
        };
        bound(s.ops, sizeof ops_, 65);
        bound(s.in_syncs, sizeof syncs_, 17);
        bound(s.out_syncs, (24 - nin) * sizeof(drm_edu_accel_sync), 17);
      } else if (where < 8) {
        static const Field f[] = {
            FLD(drm_edu_accel_copy_op, type),       FLD(drm_edu_accel_copy_op, flags),
            FLD(drm_edu_accel_copy_op, src_handle), FLD(drm_edu_accel_copy_op, dst_handle),
            FLD(drm_edu_accel_copy_op, src_offset), FLD(drm_edu_accel_copy_op, dst_offset),
            FLD(drm_edu_accel_copy_op, size)};
        drm_edu_accel_copy_op& o = ops_[r_.below(nops)];
        mutate(&o, f, std::size(f), r_);
        // A valid huge H2H would occupy the engine for hours: keep valid sizes bounded.
        if (o.size > (1u << 20) && o.size < (1ull << 30)) o.size = 1ull << 40;
      } else if (nin + nout) {
        static const Field f[] = {FLD(drm_edu_accel_sync, handle), FLD(drm_edu_accel_sync, flags),
                                  FLD(drm_edu_accel_sync, point)};
        mutate(&syncs_[r_.below(nin + nout)], f, 3, r_);
      } else {
        s.in_syncs.count = 1;
        s.in_syncs.stride = sizeof(drm_edu_accel_sync);
        s.in_syncs.array = r_.chance(0.5) ? 8 : 0xffffffff81000000ull;
      }
    }
    fz(fd, DRM_IOCTL_EDU_ACCEL_SUBMIT, &s);
  }

  void syncobj_ops(int fd, int w) {
    switch (r_.below(4)) {
      case 0:
      case 1: {
        drm_syncobj_create c{};
        c.flags = r_.chance(0.3) ? DRM_SYNCOBJ_CREATE_SIGNALED : 0;
        if (fz(fd, DRM_IOCTL_SYNCOBJ_CREATE, &c) == 0) s_.syncs[w][r_.below(16)] = c.handle;
        break;
      }
      case 2: {
        drm_syncobj_destroy d{};
        d.handle = syncobj(w);
        fz(fd, DRM_IOCTL_SYNCOBJ_DESTROY, &d);
        break;
      }
      default: {
        uint32_t h = syncobj(w);
        drm_syncobj_wait wt{};
        wt.handles = reinterpret_cast<uintptr_t>(&h);
        wt.count_handles = 1;
        wt.timeout_nsec = abs_ns(0.05);
        fz(fd, DRM_IOCTL_SYNCOBJ_WAIT, &wt);
      }
    }
  }

  void mmap_offset(int fd) {
    uint64_t off = r_.chance(0.85) ? s_.offsets[r_.below(kSlots)].load() : (interesting(r_, 8) & ~0xfffull);
    const size_t n = kPage * r_.range(1, 4);
    const bool priv = r_.chance(0.1);
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, priv ? MAP_PRIVATE : MAP_SHARED, fd,
                   static_cast<off_t>(off));
    if (p == MAP_FAILED) return;
    touch(p, true);
    keep_map(p, n | 1);
  }

  void unmap_or_dontneed() {
    auto [p, n] = take_map();
    if (!p) return;
    if (r_.chance(0.2) && (n & 1)) {
      // A mapped BO after MADV_DONTNEED: must read back (a .fault handler), not SIGBUS.
      madvise(p, n & ~size_t{1}, MADV_DONTNEED);
      touch(p, true, true);
    }
    munmap(p, n & ~size_t{1});
  }

  // Replaces part of the userptr arena with fresh pages (pinned pages must survive it, the
  // driver's interval notifier marks the BOs over it invalid). One MAP_FIXED mmap, never
  // munmap + mmap: the hole in between let other threads' BO mmaps land inside the arena, and
  // the fuzzer then unmapped or replaced them under their owners (SEGV_MAPERR on the owner's
  // next touch, seen in the 2026-12-03 long run and misread as a driver bug).
  void arena_remap() {
    const size_t len = kPage * r_.range(1, 64);
    uint8_t* at = s_.arena + kPage * r_.below((s_.arena_size - len) / kPage);
    if (mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
      logf("  fuzz: arena remap at %p: %s", static_cast<void*>(at), strerror(errno));
  }

  void reopen(int w) {
    int nfd = open(s_.render[w].c_str(), O_RDWR | O_CLOEXEC);
    if (nfd < 0) return;
    int old = s_.fds[w].exchange(nfd);
    close(old);  // other threads may be inside an ioctl on it
  }
};

}  // namespace

int fuzz_part(const Params& P, Part& part) {
  auto nodes = nodes_open_to_all();
  if (nodes.empty()) return part.fail("no edu_accel device bound");
  const int64_t pins0 = pins_outstanding();
  const int procs = P.long_run ? 6 : 3, threads = P.long_run ? 4 : 3;
  const int iters = P.long_run ? 5500 : 1200;
  const uint64_t ioctls0 = shared()->ioctls.load(), sigbus0 = shared()->sigbus.load(),
                 other0 = shared()->sigbus_other.load();
  logf("fuzz: %d processes x %d threads x %d actions on %zu device(s), seed %llu", procs, threads, iters,
       nodes.size(), static_cast<unsigned long long>(P.seed));
  std::vector<pid_t> pids;
  for (int pi = 0; pi < procs; ++pi) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      if (!drop_to(pi % 2 ? kUidB : kUidA, 64 << 20)) _exit(90);
      struct sigaction sa {};
      sa.sa_sigaction = on_sigbus;
      sa.sa_flags = SA_SIGINFO | SA_NODEFER;
      sigaction(SIGBUS, &sa, nullptr);
      sigaction(SIGSEGV, &sa, nullptr);
      auto* s = new State();
      s->fresh_userptr = P.known_bugs.count("dma_api_overlapping_userptr") > 0;
      for (auto& b : s->dmabufs) b = -1;
      for (int w = 0; w < 2; ++w) {
        s->render[w] = nodes[w % nodes.size()].render;
        s->fds[w] = open(s->render[w].c_str(), O_RDWR | O_CLOEXEC);
        if (s->fds[w] < 0) {
          logf("  fuzz: open %s as uid %d: %s", s->render[w].c_str(), getuid(), strerror(errno));
          _exit(91);
        }
      }
      s->arena_size = 8 << 20;
      s->arena = static_cast<uint8_t*>(
          mmap(nullptr, s->arena_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      memset(s->arena, 0x5a, s->arena_size);
      g_arena = s->arena;
      g_arena_size = s->arena_size;
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back(
            [s, t, pi, &P, iters] { Worker(*s, mix(P.seed ^ mix(1000 + pi * 64 + t))).run(iters); });
      for (auto& t : ts) t.join();
      Rng r(P.seed, 77, pi);
      if (r.chance(0.5)) _exit(0);  // leave everything open: the file release path cleans up
      for (auto& m : s->maps) {
        void* p = m.p.load();
        if (p && p != kBusy) munmap(p, m.n & ~size_t{1});
      }
      close(s->fds[0]);
      close(s->fds[1]);
      _exit(0);
    }
    pids.push_back(pid);
  }
  int bad = wait_children(pids, 1800, "fuzz");
  if (bad)
    part.fail("%d fuzzing process(es) died or hung (a signal other than a handled SIGBUS is a finding)", bad);
  const uint64_t sigbus = shared()->sigbus.load() - sigbus0;
  if (sigbus)
    part.check_known(false, "mmap_sigbus_after_dontneed",
                     "%llu SIGBUS/SIGSEGV on touching a mapped BO after MADV_DONTNEED (no .fault handler?)",
                     static_cast<unsigned long long>(sigbus));
  if (const uint64_t other = shared()->sigbus_other.load() - other0)
    part.check_known(false, "mmap_signal_in_fuzz", "%llu SIGBUS/SIGSEGV on touching a freshly mapped BO",
                     static_cast<unsigned long long>(other));
  check_released(part, nodes, pins0, "every fuzzing process exited");
  int copies_bad = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    copies_bad += verified_copy_as_user(nodes[i].render, mix(P.seed + 11 + i), 3 * kChunk, false) != 0;
    copies_bad += verified_copy_as_user(nodes[i].render, mix(P.seed + 21 + i), 65536 + 123, true) != 0;
  }
  if (copies_bad) part.fail("%d verified copies failed after fuzzing", copies_bad);
  std::string names;
  int distinct = 0;
  for (int e = 0; e < 256; ++e)
    if (shared()->errno_bits[e / 64].load() & (1ull << (e % 64))) {
      ++distinct;
      names +=
          (names.empty() ? "" : ",") + std::string(e ? strerrorname_np(e) ? strerrorname_np(e) : "?" : "OK");
    }
  part.figure("ioctls", shared()->ioctls.load() - ioctls0);
  part.figure("distinct_errnos", static_cast<uint64_t>(distinct));
  logf("fuzz: results seen: %s", names.c_str());
  return 0;
}

}  // namespace stress
