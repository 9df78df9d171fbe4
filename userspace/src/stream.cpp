#include "hostrt/stream.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/event_recording.hpp"
#include "detail/expects.hpp"
#include "detail/fork_guard.hpp"
#include "detail/peer_views.hpp"
#include "detail/pool/pool_core.hpp"
#include "detail/pool/stream_core_ref.hpp"
#include "detail/registry.hpp"
#include "detail/trace.hpp"
#include "hostrt/event.hpp"
#include "hostrt/pool.hpp"

namespace hostrt {

namespace {

detail::StreamCore& live(const std::shared_ptr<detail::StreamCore>& c, const char* what) {
  if (!c) throw InvalidArgument(EINVAL, std::string(what) + ": the stream is destroyed (or moved from)");
  if (c->device()->forked())
    detail::throw_used_after_fork(std::string(what) + ": stream " + std::to_string(c->id()));
  return *c;
}

// One side of a copy, resolved to what the UAPI wants.
struct End {
  bool pageable = false;
  std::uint32_t handle = 0;  // 0: the device buffer
  std::uint64_t offset = 0;
  bool pinned = false;  // host_alloc memory: maybe a pool's block
};

// A copy naming a pool block on a stream is a use of the block by that stream, recorded as
// record_stream would (PyTorch's copy_ records its stream): a free on the block's home stream
// then also waits for this copy, whether or not the user remembered record_stream. Before
// the submit: a recorded use whose copy then fails only makes the free wait longer.
void record_pool_use(const void* p, detail::StreamCore& s) {
  if (Pool* pool = detail::find_pool(p))
    (void)hostrt::detail::Access::core(*pool).record_use(p, detail::pool::stream_ref(s));
}

End resolve_device(const void* p, std::size_t n, const Capabilities& caps, const char* role) {
  const auto d = DevicePtr::from(p);
  EXPECTS(d, std::string("memcpy_async: ") + role + " must be a device address (DevicePtr::as_void())");
  EXPECTS(d->offset <= caps.max_transfer && n <= caps.max_transfer - d->offset,
          std::string("memcpy_async: device ") + role + " range [" + std::to_string(d->offset) + ", " +
              std::to_string(d->offset + n) + ") ends past the device's max transfer " +
              std::to_string(caps.max_transfer));
  return {false, 0, d->offset};
}

End resolve_host(const std::shared_ptr<detail::DeviceCore>& dev, const void* p, std::size_t n, bool written,
                 const char* role) {
  EXPECTS(!DevicePtr::from(p),
          std::string("memcpy_async: ") + role + " is a device address but the copy kind wants host memory");
  const auto e = detail::registry().find(p);
  if (!e) return {true, 0, 0};
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (e->device != dev.get() && !e->peers)
    throw WrongDevice(EXDEV, std::string("memcpy_async: ") + role + " is " + to_string(e->type) +
                                 " memory of another device, or of another Device::open of it (" +
                                 to_string(e->backend) + " #" + std::to_string(e->device_index) +
                                 "), not portable");
  EXPECTS(n <= e->end - a, std::string("memcpy_async: ") + role + " range of " + std::to_string(n) +
                               " bytes runs past the end of its " + to_string(e->type) + " buffer (" +
                               std::to_string(e->end - a) + " bytes left)");
  EXPECTS(!(written && e->readonly), "memcpy_async: destination is registered read-only");
  const std::uint32_t handle = e->device == dev.get() ? e->handle : e->peers->handle_for(dev);
  return {false, handle, a - e->begin, e->type == MemoryType::Pinned};
}

// The jobs one memcpy_async queued, for HOSTRT_TRACE: written when the call returns.
class CopyTrace {
 public:
  CopyTrace(std::uint64_t stream, const void* dst, const void* src, std::size_t n, CopyKind kind) noexcept
      : stream_(stream), dst_(dst), src_(src), n_(n), kind_(kind) {}
  CopyTrace(const CopyTrace&) = delete;
  CopyTrace& operator=(const CopyTrace&) = delete;
  ~CopyTrace() {
    if (last_ == 0) return;
    using detail::trace::Kind;
    detail::trace::emit(Kind::Copy, stream_, reinterpret_cast<std::uintptr_t>(dst_),
                        reinterpret_cast<std::uintptr_t>(src_), n_);
    detail::trace::emit(Kind::CopyPoints, stream_, first_, last_, static_cast<std::uint64_t>(kind_));
  }
  std::uint64_t operator()(std::uint64_t seqno) noexcept {
    if (first_ == 0) first_ = seqno;
    last_ = seqno;
    return seqno;
  }

 private:
  std::uint64_t stream_;
  const void* dst_;
  const void* src_;
  std::size_t n_;
  CopyKind kind_;
  std::uint64_t first_ = 0, last_ = 0;
};

// A staged chunk, released (stream-ordered) when it goes.
class StagedChunk {
 public:
  explicit StagedChunk(detail::Staging& st) noexcept : st_(st) {}
  StagedChunk(const StagedChunk&) = delete;
  StagedChunk& operator=(const StagedChunk&) = delete;
  ~StagedChunk() {
    if (chunk.ptr == nullptr) return;
    try {
      st_.release(chunk);
    } catch (...) {  // the chunk stays out of the ring: a leak, never a reuse
    }
  }
  void acquire(std::size_t bytes) { chunk = st_.acquire(bytes); }
  detail::Staging::Chunk chunk;

 private:
  detail::Staging& st_;
};

}  // namespace

Stream::Stream(std::shared_ptr<detail::StreamCore> core) noexcept : core_(std::move(core)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) core_ = std::move(o.core_);
  return *this;
}
Stream::~Stream() = default;

std::uint64_t Stream::id() const noexcept { return core_ ? core_->id() : 0; }
std::size_t Stream::device_index() const noexcept { return core_ ? core_->device()->index() : 0; }
StreamPriority Stream::priority() const noexcept {
  return core_ ? core_->priority() : StreamPriority::Normal;
}
std::uint64_t Stream::last_submitted() const noexcept { return core_ ? core_->last_submitted() : 0; }
bool Stream::reached(std::uint64_t point) const noexcept { return core_ && core_->reached(point); }

void Stream::wait_point(std::uint64_t point) { live(core_, "wait_point").wait(point); }

void Stream::synchronize() {
  auto& s = live(core_, "synchronize");
  const detail::trace::ApiSpan span(detail::trace::Api::StreamSynchronize, s.id(), 0, s.last_submitted());
  s.drain_host_funcs();
  // What the stream waits for (Stream::wait) is part of it, as a wait enqueued in CUDA is:
  // the other streams' failures stay theirs to report.
  if (s.state_word() & detail::StreamCore::kWaitsQueued)
    for (const auto& [other, point] : s.pending_waits()) other->wait_as_waited(point);
  s.wait(s.last_submitted());
}

bool Stream::query() {
  auto& s = live(core_, "query");
  if (s.host_funcs_queued()) return false;
  s.drain_host_funcs();  // what a function threw
  if ((s.state_word() & detail::StreamCore::kWaitsQueued) && !s.pending_waits().empty()) return false;
  const std::uint64_t p = s.last_submitted();
  if (!s.reached(p)) return false;
  s.check_failure(p);
  return true;
}

void Stream::memcpy_async(void* dst, const void* src, std::size_t n, CopyKind kind) {
  auto& s = live(core_, "memcpy_async");
  const auto& dev = s.device();
  dev->backend("memcpy_async");  // DeviceLost once closed
  EXPECTS(kind == CopyKind::H2D || kind == CopyKind::D2H || kind == CopyKind::H2H,
          "memcpy_async: unknown copy kind " + std::to_string(static_cast<int>(kind)));
  if (n == 0) return;
  EXPECTS(dst != nullptr && src != nullptr, "memcpy_async: null pointer");
  // Host-to-host copies stage front to back, a chunk at a time and a job at a time (the
  // driver sees one job, not the whole copy): a destination that starts inside the source,
  // after it, would overwrite source bytes before they are read.
  if (kind == CopyKind::H2H) {
    const auto to = reinterpret_cast<std::uintptr_t>(dst), from = reinterpret_cast<std::uintptr_t>(src);
    EXPECTS(!(to > from && to - from < n),
            "memcpy_async: the destination starts inside the source, after it (host-to-host copies "
            "run front to back: overlapping ranges copy only to a lower address)");
  }
  const detail::trace::ApiSpan span(detail::trace::Api::Memcpy, s.id(), n, static_cast<std::uint64_t>(kind));
  CopyTrace traced(s.id(), dst, src, n, kind);
  const Capabilities& caps = dev->caps();
  const End from = kind == CopyKind::D2H ? resolve_device(src, n, caps, "source")
                                         : resolve_host(dev, src, n, false, "source");
  const End to = kind == CopyKind::H2D ? resolve_device(dst, n, caps, "destination")
                                       : resolve_host(dev, dst, n, true, "destination");
  if (from.pinned) record_pool_use(src, s);
  if (to.pinned) record_pool_use(dst, s);

  detail::CopyOp op{};
  op.type = static_cast<std::uint32_t>(kind);
  op.size = n;
  op.src_handle = from.handle;
  op.src_offset = from.offset;
  op.dst_handle = to.handle;
  op.dst_offset = to.offset;

  if (!from.pageable && !to.pageable) {
    // The driver bounds the device traffic of one job (so no job holds the one engine for
    // long): a larger copy goes as several jobs, back to back on the stream.
    const std::size_t per_job = caps.max_job_bytes / (kind == CopyKind::H2H ? 2 : 1);
    if (per_job == 0 || n <= per_job) {
      traced(s.submit({&op, 1}));
      return;
    }
    for (std::size_t done = 0; done < n; done += per_job) {
      detail::CopyOp o = op;
      o.size = std::min(n - done, per_job);
      o.src_offset = from.offset + done;
      o.dst_offset = to.offset + done;
      traced(s.submit({&o, 1}));
    }
    return;
  }
  // Pageable memory is staged chunk by chunk through the stream's ring (see stream.hpp for
  // who waits). A staged chunk goes back stream-ordered, behind the job that uses it.
  detail::Staging& staging = s.staging();
  const auto* in = static_cast<const unsigned char*>(src);
  auto* out = static_cast<unsigned char*>(dst);
  for (std::size_t done = 0; done < n;) {
    const std::size_t c = std::min(n - done, detail::Staging::kChunkBytes);
    detail::CopyOp o = op;
    o.size = c;
    o.src_offset = from.offset + done;
    o.dst_offset = to.offset + done;
    StagedChunk sc(staging), dc(staging);
    if (from.pageable) {
      sc.acquire(c);
      std::memcpy(sc.chunk.ptr, in + done, c);
      o.src_handle = sc.chunk.handle;
      o.src_offset = sc.chunk.offset;
    }
    if (to.pageable) {
      dc.acquire(c);
      o.dst_handle = dc.chunk.handle;
      o.dst_offset = dc.chunk.offset;
    }
    const std::uint64_t seqno = traced(s.submit({&o, 1}));
    if (to.pageable) {
      s.wait(seqno);
      std::memcpy(out + done, dc.chunk.ptr, c);
    }
    done += c;
  }
}

void Stream::wait(const Event& event) {
  auto& s = live(core_, "wait");
  const auto rec = detail::Access::snapshot(event);
  if (!rec) return;  // never recorded: nothing to wait for
  const detail::trace::ApiSpan span(detail::trace::Api::StreamWait, s.id(), rec->core->id(), rec->point);
  const auto& other = rec->core;
  // Another device's event: its job's fence becomes an in-fence of ours at the next submit.
  if (other->device()->kind() != s.device()->kind())
    throw WrongDevice(EXDEV, "Stream::wait: the event was recorded on a " +
                                 std::string(to_string(other->device()->kind())) +
                                 " device, the stream is on a " + to_string(s.device()->kind()) + " device");
  // A point on this stream itself is already in order; one already reached adds nothing.
  auto add = [&](const std::shared_ptr<detail::StreamCore>& on, std::uint64_t point) {
    if (point != 0 && on != core_ && !on->reached(point)) s.add_wait(on, point);
  };
  add(other, rec->point);
  for (const auto& [on, point] : rec->deps) add(on, point);
}

void Stream::launch_host_func(std::function<void()> fn) {
  EXPECTS(fn, "launch_host_func: no function");
  live(core_, "launch_host_func").launch_host_func(std::move(fn));
}

void Stream::destroy() noexcept { core_.reset(); }

}  // namespace hostrt
