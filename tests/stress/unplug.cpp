// Part "unplug": sysfs unbind/bind and PCI remove/rescan of one edu device while an
// unprivileged process streams verified DMA through it and a witness copies through the
// other device. The streamer must get ENODEV (not hang, not see corrupted bytes), pins must
// come back, the other device keeps working, and the driver binds again.
#include "stress.hpp"

namespace stress {
namespace {

struct Stream {
  std::atomic<uint64_t> jobs_ok;
  std::atomic<int> stop_witness;
  std::atomic<uint64_t> witness_ok, witness_bad;
};

// Round trips (H2D+D2H in one job) until an ioctl says ENODEV. Exit 0 then; 3 corrupted
// bytes; 4 an unexpected errno.
void on_sigbus(int) { _exit(7); }

// mapped: created BOs written through their mmaps, completion page read for job errors;
// otherwise userptr BOs of heap memory and no DRM mapping at all (so a missing .fault
// handler cannot hide whether the process gets ENODEV).
[[noreturn]] void streamer(const std::string& render, uint64_t seed, Stream* st, bool mapped) {
  if (!drop_to(kUidA, 16 << 20)) _exit(90);
  // Touching a BO mapping after the unplug: SIGBUS means the mapping lost its pages.
  signal(SIGBUS, on_sigbus);
  Rng r(seed);
  Fd f(render);
  const int fd = f.get();
  drm_edu_accel_queue_create q;
  Mapped src, dst;
  std::vector<uint8_t> heap(3 * kChunk);
  uint32_t done = 0;
  if (fd < 0 || queue_create(fd, &q) || drmSyncobjCreate(fd, 0, &done)) _exit(91);
  if (mapped) {
    if (mapped_bo(fd, kChunk, &src) || mapped_bo(fd, kChunk, &dst)) _exit(91);
  } else {
    src.p = heap.data() + 3;
    dst.p = heap.data() + kChunk + 11;
    if (bo_userptr(fd, src.p, kChunk, 0, &src.handle) || bo_userptr(fd, dst.p, kChunk, 0, &dst.handle))
      _exit(91);
  }
  volatile drm_edu_accel_completion* slot = nullptr;
  if (mapped) {
    drm_edu_accel_bo_info info;
    bo_info(fd, q.completion_handle, &info);
    auto* page = static_cast<uint8_t*>(
        mmap(nullptr, kPage, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(info.mmap_offset)));
    if (page == MAP_FAILED) _exit(92);
    slot = reinterpret_cast<volatile drm_edu_accel_completion*>(page + q.completion_offset);
  }
  int errors = 0;
  uint64_t pending_bad = 0;  // a mismatch counts as corruption only if the device is still there
  for (;;) {
    const uint32_t n = static_cast<uint32_t>(r.range(1, kChunk));
    r.fill(src.p, n);
    memset(dst.p, 0, n);
    drm_edu_accel_copy_op o[2] = {op(DRM_EDU_ACCEL_OP_H2D, src.handle, 0, 0, 0, n),
                                  op(DRM_EDU_ACCEL_OP_D2H, 0, 0, dst.handle, 0, n)};
    drm_edu_accel_sync out = sync_point(done);
    uint64_t seq = 0;
    int err = submit(fd, q.queue, o, 2, nullptr, 0, &out, 1, &seq);
    if (err == ENODEV) _exit(0);
    if (pending_bad) {
      shared()->corrupted += pending_bad;
      logf("  streamer: %llu bytes differ in a job reported successful",
           static_cast<unsigned long long>(pending_bad));
      _exit(3);
    }
    if (err) {
      logf("  streamer: SUBMIT %s", strerror(err));
      _exit(4);
    }
    err = wait_syncobj(fd, done, 300);
    if (err) {
      logf("  streamer: syncobj wait %s for job %llu", strerror(err), static_cast<unsigned long long>(seq));
      _exit(5);
    }
    if (slot && slot->completed >= seq && slot->failed >= seq) {
      if (++errors > 64) _exit(6);
      continue;  // failed job (-ENODEV, -ECANCELED ...): the next SUBMIT tells
    }
    uint64_t bad = 0;
    for (uint32_t i = 0; i < n; ++i) bad += src.p[i] != dst.p[i];
    shared()->bytes_verified += n - bad;
    if (bad) {
      pending_bad = bad;
      continue;
    }
    st->jobs_ok++;
  }
}

bool sysfs_write(const std::string& path, const std::string& v) {
  // In a child: a remove that blocks forever must not take the whole run with it.
  return run_child(
             [&] {
               int fd = open(path.c_str(), O_WRONLY);
               if (fd < 0) return 1;
               return write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size()) ? 0 : 2;
             },
             300) == 0;
}

}  // namespace

int unplug_part(const Params& P, Part& part) {
  auto nodes = nodes_open_to_all();
  if (nodes.empty()) return part.fail("no edu_accel device bound");
  const int total = P.long_run ? 12 : 2;
  const int64_t pins0 = pins_outstanding();
  auto* st = static_cast<Stream*>(
      mmap(nullptr, sizeof(Stream), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  Rng r(P.seed, 5);
  int done_unplugs = 0;
  for (int u = 0; u < total; ++u) {
    nodes = nodes_open_to_all();
    if (nodes.empty()) return part.fail("no device bound before unplug %d", u);
    const auto victim = nodes[u % nodes.size()];
    const bool other = nodes.size() > 1;
    const auto witness_node = other ? nodes[(u + 1) % nodes.size()] : victim;
    const bool remove = u % 2 == 1;
    st->jobs_ok = 0;
    st->stop_witness = 0;
    st->witness_ok = st->witness_bad = 0;
    fflush(nullptr);
    pid_t ps = fork();
    const bool mapped = u % 4 == 1 || u % 4 == 2;
    if (ps == 0) streamer(victim.render, mix(P.seed + 100 + u), st, mapped);
    pid_t pw = -1;
    if (other) {
      pw = fork();
      if (pw == 0) {
        if (!drop_to(kUidB, 16 << 20)) _exit(90);
        Fd f(witness_node.render);
        Rng wr(mix(P.seed + 200 + u));
        while (!st->stop_witness.load()) {
          if (verified_copy_fd(f.get(), wr, 1 + wr.below(2 * kChunk), wr.chance(0.5)))
            st->witness_bad++;
          else
            st->witness_ok++;
        }
        _exit(0);
      }
    }
    // Let some DMA run, then pull the device at a random point.
    const uint64_t want = r.range(1, 4);
    for (int i = 0; i < 3000 && st->jobs_ok.load() < want; ++i) usleep(10000);
    usleep(static_cast<useconds_t>(r.below(150000)));
    const std::string bdf = victim.pci;
    bool ok = remove ? sysfs_write("/sys/bus/pci/devices/" + bdf + "/remove", "1")
                     : sysfs_write("/sys/bus/pci/drivers/edu_accel/unbind", bdf);
    if (!ok) part.fail("%s of %s failed or hung", remove ? "PCI remove" : "unbind", bdf.c_str());
    int status = 0;
    const double end = now_s() + 600;
    while (waitpid(ps, &status, WNOHANG) != ps) {
      if (now_s() > end) {
        kill(ps, SIGKILL);
        waitpid(ps, &status, 0);
        status = -1;
        break;
      }
      usleep(20000);
    }
    const int src_rc = status == -1 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (src_rc == 0) {
      shared()->enodev_seen++;
    } else if (src_rc == 7) {
      part.check_known(
          false, "mmap_sigbus_after_unplug",
          "%s of %s: the streaming process got SIGBUS touching its mapped BO (before any ioctl said ENODEV)",
          remove ? "remove" : "unbind", bdf.c_str());
    } else {
      part.fail("%s of %s: the streaming process did not end with ENODEV (%s %d, after %llu good jobs)",
                remove ? "remove" : "unbind", bdf.c_str(), src_rc == -1 ? "hung" : "exit", src_rc,
                static_cast<unsigned long long>(st->jobs_ok.load()));
    }
    // Back again.
    ok = remove ? sysfs_write("/sys/bus/pci/rescan", "1")
                : sysfs_write("/sys/bus/pci/drivers/edu_accel/bind", bdf);
    if (!ok) part.fail("%s of %s failed", remove ? "rescan" : "bind", bdf.c_str());
    bool back = false;
    for (int i = 0; i < 300 && !back; ++i) {
      for (auto& n : hostrt::detail::bound_edu_nodes())
        if (n.pci == bdf && !n.render.empty() && access(n.render.c_str(), F_OK) == 0) back = true;
      if (!back) usleep(100000);
    }
    if (!back)
      part.fail("%s did not come back bound to edu_accel after %s", bdf.c_str(), remove ? "rescan" : "bind");
    if (pw > 0) {
      st->stop_witness = 1;
      waitpid(pw, &status, 0);
      if (st->witness_bad.load() || !st->witness_ok.load())
        part.fail("the other device %s: %llu verified copies failed, %llu passed during the unplug",
                  witness_node.pci.c_str(), static_cast<unsigned long long>(st->witness_bad.load()),
                  static_cast<unsigned long long>(st->witness_ok.load()));
    }
    const int64_t leaked = settle_pins(pins0);
    if (leaked) {
      part.leaked_pins += leaked;
      part.fail("%lld pinned pages not released after unplug %d", static_cast<long long>(leaked), u);
    }
    for (auto& n : nodes_open_to_all())
      if (n.pci == bdf && verified_copy_as_user(n.render, mix(P.seed + 300 + u), kChunk + 5, u % 4 < 2))
        part.fail("verified copy on %s failed after it was bound again", bdf.c_str());
    ++done_unplugs;
    logf("unplug %d (%s streamer): %s of %s after %llu verified jobs: streamer %s, device %s", u,
         mapped ? "mmap" : "userptr", remove ? "PCI remove/rescan" : "unbind/bind", bdf.c_str(),
         static_cast<unsigned long long>(st->jobs_ok.load()),
         src_rc == 0   ? "got ENODEV"
         : src_rc == 7 ? "got SIGBUS"
                       : "failed",
         back ? "bound again" : "NOT back");
  }
  shared()->unplugs += static_cast<uint64_t>(done_unplugs);
  part.figure("unplugs", static_cast<uint64_t>(done_unplugs));
  return 0;
}

}  // namespace stress
