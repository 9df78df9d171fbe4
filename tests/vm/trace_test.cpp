// The driver's tracepoints, read back the way a learner would (tracefs): one copy leaves its
// whole path in the trace, pin to unpin, with one client id on every event; the device buffer
// is scrubbed exactly when the client changes. Root only (tracefs), as the VM runs tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>
#include <xf86drm.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "detail/sysfs.hpp"
#include "edu_device.hpp"

using namespace edu_test;

namespace {

constexpr uint64_t kChunk = 4095;

// Without icount every edu DMA takes 100 ms of real time: keep those runs short.
bool slow_dma() { return env_is("VM_ICOUNT", "off"); }

struct Event {
  std::string name;
  std::string text;   // the fields, as TP_printk wrote them
  std::string flags;  // the context column: "d.h1." is a hard interrupt, "....." a thread
  std::string task;   // "comm-pid" of the task the event ran in
  // In a hard interrupt handler (ftrace's 'h', or 'H' for one that interrupted a softirq).
  bool hardirq() const { return flags.size() > 2 && (flags[2] == 'h' || flags[2] == 'H'); }
  std::optional<std::string> field(const std::string& key) const {
    const std::string k = key + "=";
    size_t at = 0;
    while ((at = text.find(k, at)) != std::string::npos) {
      if (at == 0 || text[at - 1] == ' ') {
        const size_t end = text.find(' ', at);
        return text.substr(at + k.size(), end == std::string::npos ? std::string::npos : end - at - k.size());
      }
      at += k.size();
    }
    return std::nullopt;
  }
  uint64_t num(const std::string& key) const {
    const auto v = field(key);
    return v ? std::stoull(*v, nullptr, 0) : ~0ull;
  }
};

// The guest mounts tracefs: there, no edu_accel events means the kernel refused the module's
// tracepoints (a module with a bad taint, e.g. one built without symbol versions, gets none),
// which is a failure, not a reason to skip. Elsewhere the tests skip.
void no_events() {
  if (access("/sys/kernel/tracing/events", F_OK) == 0)
    FAIL() << "tracefs has no edu_accel events: is the module tainted? (dmesg: \"module has bad taint\")";
  GTEST_SKIP() << "no tracefs here";
}

// tracefs where the docs say (/sys/kernel/tracing, mounted by the guest's init), with the
// driver's events on, cleared; their lines on read().
class Tracer {
 public:
  Tracer() {
    for (const char* d : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"})
      if (access((std::string(d) + "/events/edu_accel/enable").c_str(), W_OK) == 0) {
        dir_ = d;
        break;
      }
    if (dir_.empty()) return;
    write("buffer_size_kb", "8192");
    write("trace", "");
    write("events/edu_accel/enable", "1");
  }
  ~Tracer() {
    if (!dir_.empty()) write("events/edu_accel/enable", "0");
  }
  bool ok() const { return !dir_.empty(); }
  std::vector<Event> read() {
    write("events/edu_accel/enable", "0");
    std::vector<Event> out;
    std::ifstream f(dir_ + "/trace");
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty() || line[0] == '#') continue;
      // "   task-pid  [cpu] flags  ts: name: fields"
      const size_t name_at = line.find(": edu_");
      if (name_at == std::string::npos) continue;
      const size_t colon = line.find(": ", name_at + 2);
      if (colon == std::string::npos) continue;
      const size_t cpu_end = line.find("] ");
      std::string flags;
      if (cpu_end != std::string::npos && cpu_end < name_at) {
        const size_t from = cpu_end + 2;
        flags = line.substr(from, line.find(' ', from) - from);
      }
      std::string task;
      const size_t cpu_at = line.find(" [");
      if (cpu_at != std::string::npos && cpu_at < name_at) {
        const size_t from = line.find_first_not_of(' ');
        task = line.substr(from, cpu_at - from);
        task.erase(task.find_last_not_of(' ') + 1);
      }
      out.push_back({line.substr(name_at + 2, colon - name_at - 2), line.substr(colon + 2), flags, task});
    }
    return out;
  }

 private:
  void write(const std::string& file, const std::string& value) {
    std::ofstream f(dir_ + "/" + file, std::ios::trunc);
    f << value;
  }
  std::string dir_;
};

// One open file with a queue, and helpers for one H2H copy.
class Client {
 public:
  explicit Client(const std::string& node) : fd_(node) {
    drm_edu_accel_queue_create q;
    EXPECT_EQ(queue_create(fd(), &q), 0);
    queue_ = q.queue;
  }
  int fd() const { return fd_.get(); }
  uint32_t queue() const { return queue_; }
  // Copies n bytes from src to dst (handles) and waits; returns the job's seqno.
  uint64_t copy(uint32_t src, uint32_t dst, uint64_t n) {
    uint32_t done = 0;
    EXPECT_EQ(drmSyncobjCreate(fd(), 0, &done), 0);
    const drm_edu_accel_copy_op o = op(DRM_EDU_ACCEL_OP_H2H, src, 0, dst, 0, n);
    const drm_edu_accel_sync out = sync_point(done);
    uint64_t seqno = 0;
    EXPECT_EQ(submit(fd(), queue_, &o, 1, nullptr, 0, &out, 1, &seqno), 0);
    EXPECT_EQ(drmSyncobjWait(fd(), &done, 1, static_cast<int64_t>(abs_deadline_ns(600)), 0, nullptr), 0);
    drmSyncobjDestroy(fd(), done);
    return seqno;
  }
  uint32_t bo(uint64_t size) {
    uint32_t h = 0;
    EXPECT_EQ(bo_create(fd(), size, &h), 0);
    return h;
  }

 private:
  Fd fd_;
  uint32_t queue_ = 0;
};

// Waits (guest time) until debugfs `bos` lists no BO of `user`: the driver released it.
bool released(const std::string& user) {
  const auto nodes = hostrt::detail::bound_edu_nodes();
  if (nodes.empty()) return false;
  for (int i = 0; i < 3000; ++i) {
    const auto text = hostrt::detail::read_text(nodes[0].debugfs + "/bos");
    if (text && text->find("user=" + user + " ") == std::string::npos) return true;
    usleep(10000);
  }
  return false;
}

std::string render_node() {
  const auto nodes = hostrt::detail::bound_edu_nodes();
  return nodes.empty() ? std::string() : nodes[0].render;
}

// Index of the first event of `name` at or after `from` that `pred` accepts, or npos.
template <typename P>
size_t find(const std::vector<Event>& ev, const std::string& name, size_t from, P pred) {
  for (size_t i = from; i < ev.size(); ++i)
    if (ev[i].name == name && pred(ev[i])) return i;
  return std::string::npos;
}

// The file's fdinfo in the drm-usage-stats format: key -> value.
std::map<std::string, std::string> fdinfo(int fd) {
  std::map<std::string, std::string> out;
  std::ifstream in("/proc/self/fdinfo/" + std::to_string(fd));
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto value = line.find_first_not_of(" \t", colon + 1);
    out[line.substr(0, colon)] = value == std::string::npos ? "" : line.substr(value);
  }
  return out;
}

TEST(TraceTest, OneCopyLeavesItsWholePathInTheTraceUnderOneClient) {
  const std::string node = render_node();
  ASSERT_FALSE(node.empty());
  Tracer tracer;
  if (!tracer.ok()) return no_events();
  const uint64_t n = slow_dma() ? 3 * kChunk : 1 << 20;
  // Registered user memory (scattered pages) copied into a driver-allocated BO.
  std::vector<uint8_t> mem(n);
  std::mt19937 rng(7);
  for (auto& b : mem) b = static_cast<uint8_t>(rng());
  uint64_t seqno = 0, src_nents = 0, dst_nents = 0;
  bool iommu = false;
  std::map<std::string, std::string> info, after;
  {
    Client c(node);
    info = fdinfo(c.fd());
    iommu = param(c.fd(), DRM_EDU_ACCEL_PARAM_IOMMU) == 1;
    uint32_t src = 0;
    ASSERT_EQ(bo_userptr(c.fd(), mem.data(), n, 0, &src), 0);
    const uint32_t dst = c.bo(n);
    drm_edu_accel_bo_info si, di;
    ASSERT_EQ(bo_info(c.fd(), src, &si), 0);
    ASSERT_EQ(bo_info(c.fd(), dst, &di), 0);
    src_nents = si.dma_nents;
    dst_nents = di.dma_nents;
    seqno = c.copy(src, dst, n);
    after = fdinfo(c.fd());
  }  // the file closes: the BOs go with the job's release (a worker's, after the fence)
  std::ostringstream user;
  user << "0x" << std::hex << reinterpret_cast<uintptr_t>(mem.data());
  EXPECT_TRUE(released(user.str())) << "the registration is still listed in debugfs bos";
  const std::vector<Event> ev = tracer.read();
  const size_t pin = find(ev, "edu_bo_pin", 0, [&](const Event& e) { return e.field("user") == user.str(); });
  ASSERT_NE(pin, std::string::npos) << "no edu_bo_pin of " << user.str() << " among " << ev.size()
                                    << " events";
  const uint64_t client = ev[pin].num("client");
  EXPECT_EQ(ev[pin].num("ret"), 0u);
  // fdinfo names the file by the trace's client id (how a process finds its own events).
  EXPECT_EQ(info["drm-driver"], "edu_accel");
  EXPECT_FALSE(info["drm-pdev"].empty());
  EXPECT_EQ(info["drm-client-id"], std::to_string(client));
  // drm-usage-stats: the engine time of the file's jobs (none before the copy, the copy's
  // span on the engine after it) and the memory its BOs pin (1 MiB each, the registration
  // rounded out to whole pages).
  EXPECT_EQ(info["drm-engine-dma"], "0 ns");
  EXPECT_EQ(info["drm-memory-system"], "0 KiB");
  EXPECT_EQ(info["edu_accel-transfers"], "0");
  const std::string busy = after["drm-engine-dma"];
  ASSERT_GE(busy.size(), 4u) << "no drm-engine-dma after a copy";
  EXPECT_EQ(busy.substr(busy.size() - 3), " ns");
  EXPECT_GT(std::stoull(busy), 0u);
  const uint64_t pinned_kib =
      std::stoull(after["drm-memory-system"].empty() ? "0" : after["drm-memory-system"]);
  EXPECT_GE(pinned_kib, 2 * n / 1024);
  EXPECT_LE(pinned_kib, 2 * n / 1024 + 8);
  std::printf("fdinfo after the copy: drm-engine-dma %s, drm-memory-system %s\n", busy.c_str(),
              after["drm-memory-system"].c_str());
  auto mine = [&](const Event& e) { return e.num("client") == client; };
  auto this_job = [&](const Event& e) { return mine(e) && e.num("seqno") == seqno; };
  auto of_user = [&](const Event& e) { return mine(e) && e.field("user") == user.str(); };

  const size_t map = find(ev, "edu_bo_map", pin, of_user);
  const size_t queued = find(ev, "edu_job_queued", map, this_job);
  const size_t run = find(ev, "edu_job_run", queued, this_job);
  const size_t start = find(ev, "edu_job_start", run, this_job);
  const size_t to_dev = find(ev, "edu_job_sync", start,
                             [&](const Event& e) { return this_job(e) && e.field("for") == "device"; });
  const size_t first_xfer = find(ev, "edu_xfer_start", to_dev, this_job);
  const size_t to_cpu = find(ev, "edu_job_sync", first_xfer,
                             [&](const Event& e) { return this_job(e) && e.field("for") == "cpu"; });
  const size_t done = find(ev, "edu_job_done", to_cpu, this_job);
  const size_t unmap = find(ev, "edu_bo_unmap", done, of_user);
  const size_t unpin = find(ev, "edu_bo_unpin", unmap, of_user);
  // Each step after the one before it: npos anywhere means missing or out of order.
  for (size_t at : {map, queued, run, start, to_dev, first_xfer, to_cpu, done, unmap, unpin})
    ASSERT_NE(at, std::string::npos) << "pin " << pin << " map " << map << " queued " << queued << " run "
                                     << run << " start " << start << " sync(device) " << to_dev << " xfer "
                                     << first_xfer << " sync(cpu) " << to_cpu << " done " << done << " unmap "
                                     << unmap << " unpin " << unpin;
  // The path as a learner reads it (Documentation/driver.md quotes it): each step once, the
  // first transfer pair standing for all of them.
  const size_t first_done = find(ev, "edu_xfer_done", first_xfer, this_job);
  for (size_t at : {pin, map, queued, run, start, to_dev, first_xfer, first_done, to_cpu, done, unmap, unpin})
    std::printf("  %-17s %s\n", ev[at].name.c_str(), ev[at].text.c_str());
  EXPECT_EQ(ev[map].num("ret"), 0u);
  EXPECT_EQ(ev[map].num("dma"), src_nents);
  EXPECT_EQ(ev[done].num("error"), 0u);
  EXPECT_EQ(ev[run].field("hw_fence"), ev[done].field("hw_fence")) << "one hardware fence from run to done";
  // Ownership moves cost work only where dma_need_sync() says so: with dma-direct, where it
  // bounces (swiotlb=force here), and never otherwise; 6.1's dma-iommu says yes everywhere.
  const bool synced = bouncing() || (iommu && ev[to_dev].num("bytes") != 0);
  EXPECT_EQ(ev[to_dev].num("bytes"), synced ? 2 * n : 0) << "source and destination handed to the device";
  EXPECT_EQ(ev[to_cpu].num("bytes"), synced ? n : 0) << "the destination handed back";

  // The transfers: all of this job's inside its span, paired, and as many as the docs say:
  // 2 * ceil(n / 4095) when each side is one DMA segment (the IOMMU maps a BO as one IOVA
  // range), up to one more chunk per segment boundary without it.
  uint64_t starts = 0, dones = 0;
  for (size_t i = 0; i < ev.size(); ++i) {
    if (!this_job(ev[i])) continue;
    if (ev[i].name == "edu_xfer_start" || ev[i].name == "edu_xfer_done") {
      EXPECT_GT(i, start) << "a transfer before its job started";
      EXPECT_LT(i, done) << "a transfer after its job ended";
      (ev[i].name == "edu_xfer_start" ? starts : dones)++;
    }
  }
  EXPECT_EQ(starts, dones);
  EXPECT_EQ(after["edu_accel-transfers"], std::to_string(dones)) << "fdinfo counts the job's transfers";
  // Only the chaining of transfers runs in the hard interrupt handler: CPU syncs (under
  // bouncing, megabytes of memcpy) and fence signalling (with every callback) run in the
  // engine's interrupt thread, with interrupts on.
  uint64_t chained_in_irq = 0;
  for (const Event& e : ev) {
    if (!this_job(e)) continue;
    if (e.name == "edu_xfer_start" && e.hardirq()) ++chained_in_irq;
    if ((e.name == "edu_job_sync" && e.num("bytes") != 0) || e.name == "edu_job_done") {
      EXPECT_FALSE(e.hardirq()) << e.name << " " << e.text << " in a hard interrupt (context " << e.flags
                                << ")";
    }
  }
  EXPECT_GT(chained_in_irq, 0u) << "no transfer chained from the interrupt handler";
  const uint64_t minimum = 2 * ((n + kChunk - 1) / kChunk);
  if (iommu) {
    EXPECT_EQ(src_nents, 1u);
  }
  if (src_nents == 1 && dst_nents == 1) {
    EXPECT_EQ(starts, minimum);
  } else {
    EXPECT_LE(starts, minimum + 2 * (src_nents + dst_nents));
  }
  EXPECT_GE(starts, minimum);
  std::printf("1 copy of %llu bytes: %llu transfers (iommu %s, dma segments %llu + %llu), %zu events\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(starts),
              iommu ? "on" : "off", static_cast<unsigned long long>(src_nents),
              static_cast<unsigned long long>(dst_nents), ev.size());
}

// The device buffer is shared by every client: it is cleared (one transfer of zeros) before a
// job whose client is not the buffer's last user, and only then.
TEST(TraceTest, TheDeviceBufferIsScrubbedExactlyWhenTheClientChanges) {
  const std::string node = render_node();
  ASSERT_FALSE(node.empty());
  Tracer tracer;
  if (!tracer.ok()) return no_events();
  Client a(node), b(node);
  const uint32_t a1 = a.bo(4096), a2 = a.bo(4096), b1 = b.bo(4096), b2 = b.bo(4096);
  a.copy(a1, a2, 64);  // whoever used the buffer before, from here on it is a's
  a.copy(a1, a2, 64);
  b.copy(b1, b2, 64);
  a.copy(a1, a2, 64);
  const std::vector<Event> ev = tracer.read();
  // The clients' order of starts and the scrubs between them, after a's first job.
  std::vector<std::string> seen;
  std::optional<uint64_t> ida, idb;
  for (const Event& e : ev) {
    if (e.name == "edu_job_queued" && !ida) ida = e.num("client");
    if (e.name == "edu_job_queued" && ida && e.num("client") != *ida && !idb) idb = e.num("client");
    if (!ida) continue;
    if (e.name == "edu_job_start")
      seen.push_back(e.num("client") == *ida ? "A" : e.num("client") == idb.value_or(~0ull) ? "B" : "?");
    if (e.name == "edu_scrub") {
      const uint64_t from = e.num("from_client"), to = e.num("to_client");
      seen.push_back(std::string("scrub:") +
                     (from == *ida                  ? "A"
                      : from == idb.value_or(~0ull) ? "B"
                                                    : "?") +
                     ">" +
                     (to == *ida                  ? "A"
                      : to == idb.value_or(~0ull) ? "B"
                                                  : "?"));
    }
  }
  // a's first start may be followed by a scrub from an earlier test's client; from its
  // second start on, every scrub is known.
  const auto first_a = std::find(seen.begin(), seen.end(), "A");
  ASSERT_NE(first_a, seen.end());
  std::vector<std::string> rest(first_a + 1, seen.end());
  if (!rest.empty() && rest[0].rfind("scrub:", 0) == 0 && rest[0].back() == 'A') rest.erase(rest.begin());
  // A job reaches the engine's head (edu_job_start), then the engine clears the buffer for it.
  const std::vector<std::string> want = {"A", "B", "scrub:A>B", "A", "scrub:B>A"};
  EXPECT_EQ(rest, want);
}

// The last reference to a job's BOs goes with the job, and dropping it unpins and unmaps
// (a gigabyte, or waiting on another mm's notifier): a worker does it, not the scheduler's
// thread, which also hands every queue's jobs to the engine.
TEST(TraceTest, AJobsLastBoReferenceIsDroppedByAWorkerNotTheSchedulerThread) {
  const auto nodes = hostrt::detail::bound_edu_nodes();
  ASSERT_FALSE(nodes.empty());
  Tracer tracer;
  if (!tracer.ok()) return no_events();
  const uint64_t n = 16 * 4096;
  std::vector<uint8_t> mem(n, 0x5a);
  std::ostringstream user;
  user << "0x" << std::hex << reinterpret_cast<uintptr_t>(mem.data());
  {
    Client c(nodes[0].render);
    uint32_t src = 0, done = 0;
    ASSERT_EQ(bo_userptr(c.fd(), mem.data(), n, 0, &src), 0);
    const uint32_t dst = c.bo(n);
    ASSERT_EQ(drmSyncobjCreate(c.fd(), 0, &done), 0);
    // The job's first interrupt is ignored: it stays on the engine until the timeout fails
    // it, long after the handles below are closed, so the job holds the BOs' last references.
    std::ofstream(nodes[0].debugfs + "/fault_drop_irqs") << "1\n";
    const drm_edu_accel_copy_op o = op(DRM_EDU_ACCEL_OP_H2H, src, 0, dst, 0, n);
    const drm_edu_accel_sync out = sync_point(done);
    ASSERT_EQ(submit(c.fd(), c.queue(), &o, 1, nullptr, 0, &out, 1), 0);
    ASSERT_EQ(gem_close(c.fd(), src), 0);
    ASSERT_EQ(gem_close(c.fd(), dst), 0);
    EXPECT_EQ(drmSyncobjWait(c.fd(), &done, 1, static_cast<int64_t>(abs_deadline_ns(600)), 0, nullptr), 0);
  }
  // The release runs on its own time after the fence.
  EXPECT_TRUE(released(user.str())) << "the registration is still listed in debugfs bos";
  const std::vector<Event> ev = tracer.read();
  const size_t pin = find(ev, "edu_bo_pin", 0, [&](const Event& e) { return e.field("user") == user.str(); });
  ASSERT_NE(pin, std::string::npos) << "no edu_bo_pin of " << user.str();
  const uint64_t client = ev[pin].num("client");
  const size_t run = find(ev, "edu_job_run", pin, [&](const Event& e) { return e.num("client") == client; });
  const size_t unpin =
      find(ev, "edu_bo_unpin", pin, [&](const Event& e) { return e.field("user") == user.str(); });
  ASSERT_NE(run, std::string::npos);
  ASSERT_NE(unpin, std::string::npos) << "the BO was never unpinned";
  std::printf("run_job in %s, last reference dropped in %s\n", ev[run].task.c_str(), ev[unpin].task.c_str());
  EXPECT_NE(ev[unpin].task, ev[run].task) << "unpinned by the scheduler thread";
  EXPECT_EQ(ev[unpin].task.rfind("kworker/", 0), 0u) << ev[unpin].task;
}

}  // namespace
