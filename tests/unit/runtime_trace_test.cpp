// HOSTRT_TRACE: what the runtime writes about one stream-ordered free, on both backends. The
// traced work runs in a forked child (tracing starts before the child makes any object, as the
// environment variable does at load); the parent reads the file it wrote. The driver's half of
// the same story is checked on a real trace by scripts/trace-timeline.py --check (vm.iommu.trace).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "detail/trace.hpp"
#include "hostrt/pool.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

struct Line {
  unsigned long long ns = 0;
  int pid = 0;
  unsigned tid = 0;
  std::string event;
  std::map<std::string, std::string> f;
  std::uint64_t num(const std::string& k) const { return std::stoull(f.at(k), nullptr, 0); }
};

std::vector<Line> read_trace(const std::string& path) {
  std::vector<Line> out;
  std::ifstream in(path);
  std::string text;
  while (std::getline(in, text)) {
    if (text.empty() || text[0] == '#') continue;
    std::istringstream words(text);
    Line l;
    words >> l.ns >> l.pid >> l.tid >> l.event;
    for (std::string kv; words >> kv;) {
      const auto eq = kv.find('=');
      if (eq != std::string::npos) l.f[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    out.push_back(std::move(l));
  }
  return out;
}

// What the child reports back besides the trace: the values the trace must name.
struct Facts {
  std::uint64_t stream_a = 0, stream_b = 0, queue_a = 0, point = 0, block = 0, other = 0, again = 0;
  std::uint64_t out = 0, user = 0;
};

class RuntimeTrace : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    path_ = "/tmp/hostrt-trace-test-" + std::to_string(getpid());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // Allocates a block on stream a, copies from it while a is held back, frees it on a; then
  // allocates on b (must not get it), lets a run, allocates on b again, ties the streams with
  // an event and registers a range twice. Runs in the traced child; returns what it saw.
  static Facts workload(Backend backend) {
    Facts k;
    Device d = Device::open(0, backend);
    Stream a = d.create_stream(), b = d.create_stream();
    Pool pool(d);
    PinnedBuffer out = d.host_alloc(4096), slow_src = d.host_alloc(4096), slow_dst = d.host_alloc(4096);
    auto* emu = detail::emulated_backend(d);
    k.queue_a = hostrt::detail::Access::core(a)->queue_id();
    if (emu)
      emu->hold_queue(static_cast<std::uint32_t>(k.queue_a), true);
    else  // edu takes ~100 ms per transfer under icount: the next copy stays queued behind it
      a.memcpy_async(slow_dst.data(), slow_src.data(), 4096, CopyKind::H2H);
    void* p = pool.allocate(4096, a);
    a.memcpy_async(out.data(), p, 4096, CopyKind::H2H);
    k.point = a.last_submitted();
    pool.deallocate(p, a);
    void* q = pool.allocate(4096, b);
    if (emu) emu->hold_queue(static_cast<std::uint32_t>(k.queue_a), false);
    a.synchronize();
    void* r = pool.allocate(4096, b);
    Event e;
    e.record(a);
    b.wait(e);
    b.synchronize();
    std::vector<unsigned char> user(3 * 4096);
    RegistrationCache cache(d);
    { auto whole = cache.acquire(user.data(), user.size()); }
    { auto part = cache.acquire(user.data() + 100, 200); }
    pool.deallocate(q, b);
    pool.deallocate(r, b);
    k.stream_a = a.id();
    k.stream_b = b.id();
    k.block = reinterpret_cast<std::uintptr_t>(p);
    k.other = reinterpret_cast<std::uintptr_t>(q);
    k.again = reinterpret_cast<std::uintptr_t>(r);
    k.out = reinterpret_cast<std::uintptr_t>(out.data());
    k.user = reinterpret_cast<std::uintptr_t>(user.data());
    return k;
  }

  // Runs the workload traced in a child; the facts come back through a pipe.
  Facts run_traced() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      int rc = 0;
      Facts k;
      try {
        detail::trace::start(path_.c_str());
        k = workload(GetParam());
      } catch (const Error& e) {
        std::fprintf(stderr, "traced workload: %s\n", e.what());
        rc = 1;
      }
      detail::trace::flush();
      if (write(fds[1], &k, sizeof k) != sizeof k) rc = 2;
      flush_coverage();
      _exit(rc);
    }
    close(fds[1]);
    Facts k;
    EXPECT_EQ(read(fds[0], &k, sizeof k), static_cast<ssize_t>(sizeof k));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "traced child failed";
    return k;
  }

  std::string path_;
};

const Line* find(const std::vector<Line>& t, const std::string& event,
                 const std::map<std::string, std::uint64_t>& want, std::size_t from = 0) {
  for (std::size_t i = from; i < t.size(); ++i) {
    if (t[i].event != event) continue;
    bool all = true;
    for (const auto& [k, v] : want) all = all && t[i].f.count(k) && t[i].num(k) == v;
    if (all) return &t[i];
  }
  return nullptr;
}

TEST_P(RuntimeTrace, AFreeOnABusyStreamIsPendingUntilItsPointThenReusable) {
  const Facts k = run_traced();
  ASSERT_FALSE(HasFailure());
  const auto t = read_trace(path_);
  ASSERT_FALSE(t.empty()) << "no trace written to " << path_;

  const Line* open = find(t, "device_open", {{"device", 0}});
  ASSERT_NE(open, nullptr);
  if (GetParam() == Backend::Drm) {
    EXPECT_GT(open->num("client"), 0u) << "the driver's client id, from fdinfo";
  }
  const Line* sa = find(t, "stream_create", {{"stream", k.stream_a}, {"queue", k.queue_a}});
  ASSERT_NE(sa, nullptr);
  EXPECT_EQ(sa->num("client"), open->num("client"));
  EXPECT_NE(find(t, "stream_create", {{"stream", k.stream_b}}), nullptr);

  // The copy names its stream, both ends and the job's seqno.
  EXPECT_NE(find(t, "api_begin", {{"stream", k.stream_a}, {"bytes", 4096}}), nullptr);
  EXPECT_NE(find(t, "copy", {{"stream", k.stream_a}, {"dst", k.out}, {"src", k.block}}), nullptr);
  EXPECT_NE(find(t, "copy_points", {{"stream", k.stream_a}, {"last", k.point}}), nullptr);

  // The pool's decisions, in order: new segment, free pending on (a, point), another block for
  // b meanwhile, then reusable.
  const Line* alloc = find(t, "pool_alloc", {{"addr", k.block}, {"stream", k.stream_a}});
  ASSERT_NE(alloc, nullptr);
  EXPECT_EQ(alloc->f.at("source"), "new_segment");
  const Line* freed = find(t, "pool_free", {{"addr", k.block}, {"stream", k.stream_a}});
  ASSERT_NE(freed, nullptr);
  EXPECT_GE(freed->num("waits"), 1u);
  const Line* wait =
      find(t, "pool_free_wait", {{"addr", k.block}, {"stream", k.stream_a}, {"point", k.point}});
  ASSERT_NE(wait, nullptr) << "the free waits for the copy's point";
  EXPECT_NE(k.other, k.block) << "the block was handed to stream b while a's copy was queued";
  const Line* other = find(t, "pool_alloc", {{"addr", k.other}, {"stream", k.stream_b}});
  ASSERT_NE(other, nullptr);
  const Line* reusable = find(t, "pool_reusable", {{"addr", k.block}});
  ASSERT_NE(reusable, nullptr);
  EXPECT_LE(freed->ns, other->ns);
  EXPECT_LE(other->ns, reusable->ns);
  if (k.again == k.block) {
    const Line* reuse = find(t, "pool_alloc", {{"addr", k.block}, {"stream", k.stream_b}});
    ASSERT_NE(reuse, nullptr);
    EXPECT_LE(reusable->ns, reuse->ns);
  }

  // The event tie and the synchronizations.
  EXPECT_NE(find(t, "api_begin", {{"stream", k.stream_b}, {"on_stream", k.stream_a}}), nullptr);
  int begins = 0, ends = 0;
  for (const Line& l : t) {
    begins += l.event == "api_begin";
    ends += l.event == "api_end";
  }
  EXPECT_EQ(begins, ends) << "every API span is closed";

  // The registration cache: a miss that registered the range, then a hit inside it.
  EXPECT_NE(find(t, "reg_miss", {{"addr", k.user}, {"bytes", 3 * 4096}}), nullptr);
  EXPECT_NE(find(t, "reg_hit", {{"addr", k.user + 100}, {"start", k.user}}), nullptr);
}

TEST_P(RuntimeTrace, AChildOfATracedProcessWritesOnlyItsOwnEvents) {
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    detail::trace::start(path_.c_str());
    try {
      Device d = Device::open(0, GetParam());
      Stream s = d.create_stream();
      const pid_t grandchild = fork();
      if (grandchild == 0) {
        int grc = 0;
        try {
          Device mine = Device::open(0, GetParam());
          Stream t = mine.create_stream();
        } catch (const Error&) {
          grc = 1;
        }
        detail::trace::flush();
        flush_coverage();
        _exit(grc);
      }
      int status = 0;
      waitpid(grandchild, &status, 0);
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : 3;
      std::ofstream(path_ + ".grandchild") << grandchild;
    } catch (const Error&) {
      rc = 1;
    }
    detail::trace::flush();
    flush_coverage();
    _exit(rc);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  int grandchild = 0;
  std::ifstream(path_ + ".grandchild") >> grandchild;
  const std::string theirs = path_ + "." + std::to_string(grandchild);
  const auto mine = read_trace(path_), child = read_trace(theirs);
  std::remove((path_ + ".grandchild").c_str());
  std::remove(theirs.c_str());
  ASSERT_GT(grandchild, 0);
  int opens = 0;
  for (const Line& l : child) {
    EXPECT_EQ(l.pid, grandchild) << l.event;
    opens += l.event == "device_open";
  }
  EXPECT_EQ(opens, 1) << "the parent's device_open, recorded before fork, is the parent's";
  int parent_opens = 0;
  for (const Line& l : mine) parent_opens += l.event == "device_open";
  EXPECT_EQ(parent_opens, 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, RuntimeTrace, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
