#include "detail/trace.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <new>
#include <string>
#include <vector>

#include "detail/fork_guard.hpp"

namespace hostrt::detail::trace {

namespace detail_ {
bool g_enabled = false;
}

namespace {

struct Record {
  std::uint64_t ns;
  std::uint64_t arg[4];
  std::uint32_t tid;
  Kind kind;
};

// One thread's events: chunks are allocated as they fill (a malloc every 4096 events), and a
// chunk's pointer is published before the count that covers it, so the writer at exit reads
// every thread's buffer without a lock. Buffers are never freed: a thread's events outlive it.
struct Buffer {
  static constexpr std::size_t kChunk = 4096;
  static constexpr std::size_t kMaxChunks = 1024;  // 4 Mi events per thread, then dropped
  std::array<Record*, kMaxChunks> chunks{};
  std::atomic<std::size_t> count{0};
  std::atomic<std::uint64_t> dropped{0};
  std::uint32_t tid = 0;
  Buffer* next = nullptr;  // the list of all buffers, pushed lock-free
};

std::atomic<Buffer*> g_buffers{nullptr};
std::string g_path;
pid_t g_pid = 0;
thread_local Buffer* tl_buffer = nullptr;

std::uint32_t thread_id() noexcept { return static_cast<std::uint32_t>(syscall(SYS_gettid)); }

Buffer* make_buffer() noexcept {
  auto* b = new (std::nothrow) Buffer;
  if (b == nullptr) return nullptr;
  b->tid = thread_id();
  b->next = g_buffers.load(std::memory_order_relaxed);
  while (!g_buffers.compare_exchange_weak(b->next, b, std::memory_order_release, std::memory_order_relaxed)) {
  }
  return b;
}

// A forked child starts with none of its parent's events (they are the parent's to write)
// and writes its own file.
void forget_parent_events() {
  for (Buffer* b = g_buffers.load(std::memory_order_acquire); b; b = b->next) {
    b->count.store(0, std::memory_order_relaxed);
    b->dropped.store(0, std::memory_order_relaxed);
  }
  if (tl_buffer) tl_buffer->tid = thread_id();
}

struct Fields {
  const char* event;
  const char* names[4];  // nullptr: not written
};

constexpr Fields kFields[] = {
    {"device_open", {"device", "client", nullptr, nullptr}},
    {"stream_create", {"stream", "device", "queue", "client"}},
    {"api_begin", {"api", nullptr, nullptr, nullptr}},  // the rest: kApiArgs
    {"api_end", {"api", nullptr, nullptr, nullptr}},
    {"copy", {"stream", "dst", "src", "bytes"}},
    {"copy_points", {"stream", "first", "last", "kind"}},
    {"pool_alloc", {"addr", "size", "stream", "source"}},
    {"pool_free", {"addr", "size", "stream", "waits"}},
    {"pool_free_wait", {"addr", "stream", "point", nullptr}},
    {"pool_reusable", {"addr", "size", nullptr, nullptr}},
    {"pool_trim", {"bytes", nullptr, nullptr, nullptr}},
    {"reg_hit", {"addr", "bytes", "start", nullptr}},
    {"reg_miss", {"addr", "bytes", nullptr, nullptr}},
    {"reg_stale", {"dropped", nullptr, nullptr, nullptr}},
};
constexpr const char* kApiNames[] = {"memcpy_async",       "event_record",      "stream_wait",
                                     "stream_synchronize", "event_synchronize", "device_synchronize",
                                     "pool_synchronize"};
// What api_begin's last three arguments are, per call (nullptr: not written).
constexpr const char* kApiArgs[][3] = {
    {"stream", "bytes", "kind"},  {"stream", nullptr, "point"}, {"stream", "on_stream", "point"},
    {"stream", nullptr, "point"}, {"stream", nullptr, "point"}, {nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr},
};
constexpr const char* kSourceNames[] = {"thread_cache", "arena", "new_segment"};
constexpr const char* kCopyKinds[] = {"?", "h2d", "d2h", "h2h"};  // CopyKind's values

void write_named(std::FILE* f, const char* name, std::uint64_t v) {
  if (std::string(name) == "kind" && v < std::size(kCopyKinds))
    std::fprintf(f, " kind=%s", kCopyKinds[v]);
  else
    std::fprintf(f, " %s=%llu", name, static_cast<unsigned long long>(v));
}

bool is_address(const std::string& name) {
  return name == "addr" || name == "dst" || name == "src" || name == "start";
}

void write_value(std::FILE* f, Kind k, int i, std::uint64_t v) {
  const std::string name = kFields[static_cast<int>(k)].names[i];
  if (name == "api" && v < std::size(kApiNames))
    std::fprintf(f, " api=%s", kApiNames[v]);
  else if (k == Kind::PoolAlloc && name == "source" && v < std::size(kSourceNames))
    std::fprintf(f, " source=%s", kSourceNames[v]);
  else if (is_address(name))
    std::fprintf(f, " %s=0x%llx", name.c_str(), static_cast<unsigned long long>(v));
  else
    write_named(f, name.c_str(), v);
}

void write_file() noexcept {
  std::vector<const Record*> all;
  std::uint64_t dropped = 0;
  try {
    for (Buffer* b = g_buffers.load(std::memory_order_acquire); b; b = b->next) {
      const std::size_t n = b->count.load(std::memory_order_acquire);
      dropped += b->dropped.load(std::memory_order_relaxed);
      for (std::size_t i = 0; i < n; ++i) all.push_back(&b->chunks[i / Buffer::kChunk][i % Buffer::kChunk]);
    }
  } catch (const std::bad_alloc&) {
    return;
  }
  std::stable_sort(all.begin(), all.end(), [](const Record* x, const Record* y) { return x->ns < y->ns; });
  const pid_t pid = getpid();
  // A forked child's file is <path>.<pid> (snprintf: GCC 12's -Wrestrict misreads the
  // std::string concatenation at -O3).
  char path[PATH_MAX + 32];
  if (pid != g_pid)
    std::snprintf(path, sizeof path, "%s.%d", g_path.c_str(), static_cast<int>(pid));
  else
    std::snprintf(path, sizeof path, "%s", g_path.c_str());
  std::FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "hostrt: HOSTRT_TRACE: cannot write %s\n", path);
    return;
  }
  std::fprintf(f,
               "# hostrt trace 1 pid=%d events=%zu dropped=%llu\n"
               "# <CLOCK_MONOTONIC ns> <pid> <tid> <event> <field>=<value>...\n",
               static_cast<int>(pid), all.size(), static_cast<unsigned long long>(dropped));
  for (const Record* r : all) {
    const Fields& fl = kFields[static_cast<int>(r->kind)];
    std::fprintf(f, "%llu %d %u %s", static_cast<unsigned long long>(r->ns), static_cast<int>(pid), r->tid,
                 fl.event);
    for (int i = 0; i < 4; ++i) {
      if (r->kind == Kind::ApiBegin && i > 0 && r->arg[0] < std::size(kApiArgs)) {
        if (const char* name = kApiArgs[r->arg[0]][i - 1]) write_named(f, name, r->arg[i]);
      } else if (fl.names[i]) {
        write_value(f, r->kind, i, r->arg[i]);
      }
    }
    std::fputc('\n', f);
  }
  std::fclose(f);
}

bool begin(const char* path) {
  if (path == nullptr || *path == '\0') return false;
  g_path = path;
  g_pid = getpid();
  on_fork_child(forget_parent_events);
  std::atexit(write_file);
  return true;
}

[[maybe_unused]] const bool g_initialised = (detail_::g_enabled = begin(std::getenv("HOSTRT_TRACE")));

}  // namespace

void start(const char* path) {
  if (!detail_::g_enabled) detail_::g_enabled = begin(path);
}

void append(Kind k, std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t d) noexcept {
  Buffer* buf = tl_buffer;
  if (buf == nullptr) [[unlikely]] {
    buf = tl_buffer = make_buffer();
    if (buf == nullptr) return;
  }
  const std::size_t n = buf->count.load(std::memory_order_relaxed);
  const std::size_t chunk = n / Buffer::kChunk;
  if (chunk >= Buffer::kMaxChunks) {
    buf->dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (buf->chunks[chunk] == nullptr) {
    buf->chunks[chunk] = new (std::nothrow) Record[Buffer::kChunk];
    if (buf->chunks[chunk] == nullptr) {
      buf->dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  Record& r = buf->chunks[chunk][n % Buffer::kChunk];
  r.ns = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
  r.arg[0] = a;
  r.arg[1] = b;
  r.arg[2] = c;
  r.arg[3] = d;
  r.tid = buf->tid;
  r.kind = k;
  buf->count.store(n + 1, std::memory_order_release);
}

void flush() noexcept {
  if (enabled()) write_file();
}

}  // namespace hostrt::detail::trace
