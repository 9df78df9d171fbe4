// Part "unplug": one edu device pulled while an unprivileged process streams verified DMA
// through it and a witness copies through the other device, in three ways: sysfs unbind/bind,
// PCI remove/rescan, and (in a VM run with --hotplug on) QEMU's device_del on the device's
// PCIe root port, which the guest's acpiphp handles like a real hot-unplug, then device_add.
// The streamer must get ENODEV (not hang, not see corrupted bytes), pins and driver clients
// must come back, the other device keeps working, and the driver binds again.
#include <filesystem>

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
  const volatile drm_edu_accel_completion* slot = nullptr;
  if (mapped) {
    const unsigned char* page = map_completion_page(fd);
    if (!page) _exit(92);
    slot = reinterpret_cast<const volatile drm_edu_accel_completion*>(page + q.completion_offset);
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

enum class Kind { Unbind, Remove, DeviceDel };

const char* kind_name(Kind k) {
  return k == Kind::Unbind   ? "unbind/bind"
         : k == Kind::Remove ? "PCI remove/rescan"
                             : "QEMU device_del/device_add";
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

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// QEMU's monitor, through qemu/hotplug-agent.py on the host: a request file in $OUT/hotplug,
// answered in a reply file. The agent bounds every request in host time (icount lets guest
// time race ahead while the guest idles, so a guest-time limit is only a backstop).
class Hotplug {
 public:
  Hotplug() {
    const char* on = getenv("VM_HOTPLUG");
    const char* out = getenv("OUT");
    vm_hotplug_ = on ? on : "";
    if (vm_hotplug_ == "on" && out) dir_ = std::string(out) + "/hotplug";
  }
  const std::string& vm_hotplug() const { return vm_hotplug_; }
  bool wanted() const { return !dir_.empty(); }
  // Why device_del cannot run although the VM was started for it, or "".
  std::string broken() const {
    if (!exists(dir_)) return dir_ + " is missing";
    if (exists(dir_ + "/agent-error"))
      return "the host's hotplug agent failed (see " + dir_ + "/agent-error)";
    if (!exists(dir_ + "/agent-ready")) return "the host's hotplug agent never connected to QEMU's monitor";
    return "";
  }
  // Sends "del BDF" or "add ID"; true on "ok ...", with the rest of the reply in *answer.
  bool request(const std::string& line, std::string* answer) {
    const std::string name = std::to_string(getpid()) + "-" + std::to_string(++seq_);
    const std::string req = dir_ + "/req-" + name, rep = dir_ + "/rep-" + name;
    FILE* f = fopen((req + ".tmp").c_str(), "w");
    if (!f || fprintf(f, "%s\n", line.c_str()) < 0 || fclose(f) != 0 ||
        rename((req + ".tmp").c_str(), req.c_str())) {
      *answer = "cannot write " + req + ": " + strerror(errno);
      return false;
    }
    const double end = now_s() + 3600;
    while (!exists(rep)) {
      if (exists(dir_ + "/agent-error")) {
        *answer = "the host's hotplug agent failed (see " + dir_ + "/agent-error)";
        return false;
      }
      if (now_s() > end) {
        *answer = "no reply from the host's hotplug agent";
        return false;
      }
      usleep(50000);
    }
    auto text = hostrt::detail::read_text(rep).value_or("");
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    const bool ok = text.rfind("ok ", 0) == 0;
    *answer = ok ? text.substr(3) : text;
    return ok;
  }

 private:
  std::string vm_hotplug_, dir_;
  unsigned seq_ = 0;
};

// The guest's hotplug slot holding BDF ("" if none): without one, device_del does nothing.
std::string hotplug_slot_of(const std::string& bdf) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/bus/pci/slots", ec)) {
    auto addr = hostrt::detail::read_text(e.path().string() + "/address");
    if (addr && bdf.rfind(addr->substr(0, addr->find('\n')) + ".", 0) == 0) return e.path().filename();
  }
  return "";
}

}  // namespace

int unplug_part(const Params& P, Part& part) {
  auto nodes = nodes_open_to_all();
  if (nodes.empty()) return part.fail("no edu_accel device bound");
  // sysfs rounds first, device_del rounds last.
  std::vector<Kind> kinds;
  for (int u = 0; u < (P.long_run ? 12 : 2); ++u) kinds.push_back(u % 2 ? Kind::Remove : Kind::Unbind);
  Hotplug hp;
  if (hp.wanted()) {
    if (auto why = hp.broken(); !why.empty())
      part.fail("this VM was started with hotplug on, but QEMU device_del cannot run: %s", why.c_str());
    else
      for (int u = 0; u < (P.long_run ? 3 : 1); ++u) kinds.push_back(Kind::DeviceDel);
  } else {
    logf(
        "unplug: QEMU device_del rounds NOT run: this VM has no hot-pluggable ports (VM_HOTPLUG=%s; "
        "qemu/run-vm.sh --hotplug on, as the debug configuration does); sysfs rounds only",
        hp.vm_hotplug().empty() ? "unset" : hp.vm_hotplug().c_str());
  }
  const int total = static_cast<int>(kinds.size());
  const int64_t pins0 = pins_outstanding();
  auto* st = static_cast<Stream*>(
      mmap(nullptr, sizeof(Stream), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  Rng r(P.seed, 5);
  int done_unplugs = 0;
  std::map<Kind, uint64_t> by_kind;
  for (int u = 0; u < total; ++u) {
    const Kind kind = kinds[u];
    nodes = nodes_open_to_all();
    if (nodes.empty()) return part.fail("no device bound before unplug %d", u);
    const auto victim = nodes[u % nodes.size()];
    const bool other = nodes.size() > 1;
    const auto witness_node = other ? nodes[(u + 1) % nodes.size()] : victim;
    st->jobs_ok = 0;
    st->stop_witness = 0;
    st->witness_ok = st->witness_bad = 0;
    fflush(nullptr);
    pid_t ps = fork();
    // userptr and mmap'd streamers alike for each kind (device_del: userptr first, for the pins).
    const bool mapped =
        kind == Kind::DeviceDel ? by_kind[Kind::DeviceDel] % 2 == 1 : u % 4 == 1 || u % 4 == 2;
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
    const std::string what = std::string(kind_name(kind)) + " of " + bdf;
    std::string qemu_id;  // device_del: QEMU's id of the victim, for device_add
    bool ok = true;
    if (kind == Kind::DeviceDel) {
      if (hotplug_slot_of(bdf).empty())
        part.fail(
            "%s: no hotplug slot holds it in the guest (/sys/bus/pci/slots): device_del would do nothing",
            what.c_str());
      // Answered once QEMU saw DEVICE_DELETED: the guest's acpiphp ejected the device (the
      // ACPI eject request), with the streamer still submitting.
      ok = hp.request("del " + bdf, &qemu_id);
      if (!ok) {
        part.fail("%s: %s", what.c_str(), qemu_id.c_str());
        kill(ps, SIGKILL);  // the device is still there: it would stream until the 600 s limit
        qemu_id.clear();
      }
      if (ok && exists("/sys/bus/pci/devices/" + bdf))
        part.fail("%s: QEMU deleted the device but the guest still lists it", what.c_str());
    } else {
      ok = kind == Kind::Remove ? sysfs_write("/sys/bus/pci/devices/" + bdf + "/remove", "1")
                                : sysfs_write("/sys/bus/pci/drivers/edu_accel/unbind", bdf);
      if (!ok) part.fail("%s failed or hung", what.c_str());
    }
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
          "%s: the streaming process got SIGBUS touching its mapped BO (before any ioctl said ENODEV)",
          what.c_str());
    } else {
      part.fail("%s: the streaming process did not end with ENODEV (%s %d, after %llu good jobs)",
                what.c_str(), src_rc == -1 ? "hung" : "exit", src_rc,
                static_cast<unsigned long long>(st->jobs_ok.load()));
    }
    // Back again.
    if (kind == Kind::DeviceDel) {
      std::string answer;
      if (ok && !hp.request("add " + qemu_id, &answer))
        part.fail("%s: device_add: %s", what.c_str(), answer.c_str());
    } else {
      ok = kind == Kind::Remove ? sysfs_write("/sys/bus/pci/rescan", "1")
                                : sysfs_write("/sys/bus/pci/drivers/edu_accel/bind", bdf);
      if (!ok) part.fail("%s: %s failed", what.c_str(), kind == Kind::Remove ? "rescan" : "bind");
    }
    // A hot-added device goes through acpiphp's enumeration and a full probe: slow under TCG.
    bool back = false;
    const double back_by = now_s() + (kind == Kind::DeviceDel ? 600 : 30);
    while (!back && now_s() < back_by) {
      for (auto& n : hostrt::detail::bound_edu_nodes())
        if (n.pci == bdf && !n.render.empty() && exists(n.render)) back = true;
      if (!back) usleep(100000);
    }
    if (!back) part.fail("%s did not come back bound to edu_accel after %s", bdf.c_str(), what.c_str());
    if (pw > 0) {
      st->stop_witness = 1;
      waitpid(pw, &status, 0);
      if (st->witness_bad.load() || !st->witness_ok.load())
        part.fail("the other device %s: %llu verified copies failed, %llu passed during the unplug",
                  witness_node.pci.c_str(), static_cast<unsigned long long>(st->witness_bad.load()),
                  static_cast<unsigned long long>(st->witness_ok.load()));
    }
    const std::string after = "unplug " + std::to_string(u) + " (" + what + ")";
    check_released(part, nodes_open_to_all(), pins0, after.c_str());
    for (auto& n : nodes_open_to_all())
      if (n.pci == bdf && verified_copy_as_user(n.render, mix(P.seed + 300 + u), kChunk + 5, u % 4 < 2))
        part.fail("verified copy on %s failed after it was bound again", bdf.c_str());
    ++done_unplugs;
    by_kind[kind]++;
    logf("unplug %d (%s streamer): %s%s%s after %llu verified jobs: streamer %s, device %s", u,
         mapped ? "mmap" : "userptr", what.c_str(), qemu_id.empty() ? "" : " = QEMU ", qemu_id.c_str(),
         static_cast<unsigned long long>(st->jobs_ok.load()),
         src_rc == 0   ? "got ENODEV"
         : src_rc == 7 ? "got SIGBUS"
                       : "failed",
         back ? "bound again" : "NOT back");
  }
  shared()->unplugs += static_cast<uint64_t>(done_unplugs);
  part.figure("unplugs", static_cast<uint64_t>(done_unplugs));
  part.figure("unplugs_unbind", by_kind[Kind::Unbind]);
  part.figure("unplugs_pci_remove", by_kind[Kind::Remove]);
  part.figure("unplugs_device_del", by_kind[Kind::DeviceDel]);
  return 0;
}

}  // namespace stress
