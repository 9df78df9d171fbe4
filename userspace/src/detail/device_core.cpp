#include "detail/device_core.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>

#include "detail/access.hpp"
#include "detail/expects.hpp"
#include "detail/fork_guard.hpp"
#include "detail/peer_views.hpp"
#include "detail/pool/pool_core.hpp"
#include "detail/pool/stream_core_ref.hpp"
#include "detail/pool/stream_directory.hpp"
#include "detail/registry.hpp"
#include "detail/size_math.hpp"
#include "detail/trace.hpp"
#include "hostrt/error.hpp"
#include "hostrt/pool.hpp"

namespace hostrt::detail {

namespace {

std::atomic<std::uint64_t> g_next_stream_id{1};

// A capability the driver does not report reads as 0 rather than failing the open.
std::uint64_t param_or_zero(DeviceBackend& b, std::uint32_t p) noexcept {
  try {
    return b.get_param(p);
  } catch (const Error&) {
    return 0;
  }
}

// A destroyed queue's id comes back when the driver has retired its last job, which happens
// a little after that job's fence signalled (the scheduler frees jobs in its own thread).
QueueInfo create_queue_retrying(DeviceBackend& be, std::uint32_t priority) {
  auto pause = std::chrono::milliseconds(1);
  for (int attempt = 0;; ++attempt) {
    try {
      return be.create_queue(priority);
    } catch (const OutOfMemory&) {
      if (attempt == 12) throw;  // ~4 s: the queues are really all taken
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace

DeviceCore::DeviceCore(std::unique_ptr<DeviceBackend> backend, std::size_t index, Backend kind)
    : backend_(std::move(backend)), index_(index), kind_(kind), fork_generation_(fork_generation()) {
  DeviceBackend& b = *backend_;
  const std::uint64_t v = param_or_zero(b, DRM_EDU_ACCEL_PARAM_DRIVER_VERSION);
  caps_.version_major = static_cast<std::uint32_t>(v >> 16);
  caps_.version_minor = static_cast<std::uint32_t>(v & 0xffff);
  caps_.dma_mask_bits = static_cast<unsigned>(param_or_zero(b, DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS));
  caps_.device_buffer_size = param_or_zero(b, DRM_EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE);
  caps_.max_transfer = param_or_zero(b, DRM_EDU_ACCEL_PARAM_MAX_TRANSFER);
  caps_.iommu = param_or_zero(b, DRM_EDU_ACCEL_PARAM_IOMMU) != 0;
  caps_.max_bo_size = param_or_zero(b, DRM_EDU_ACCEL_PARAM_MAX_BO_SIZE);
  caps_.max_segment_size = param_or_zero(b, DRM_EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE);
  caps_.max_queues = static_cast<unsigned>(param_or_zero(b, DRM_EDU_ACCEL_PARAM_MAX_QUEUES));
  caps_.max_ops = static_cast<unsigned>(param_or_zero(b, DRM_EDU_ACCEL_PARAM_MAX_OPS));
  caps_.max_job_bytes = param_or_zero(b, DRM_EDU_ACCEL_PARAM_MAX_JOB_BYTES);
  caps_.max_syncs = static_cast<unsigned>(param_or_zero(b, DRM_EDU_ACCEL_PARAM_MAX_SYNCS));
  if (caps_.max_syncs == 0) caps_.max_syncs = 1;  // an old driver: one is always allowed
  // Never trust a missing limit to mean "unlimited": edu's buffer is 4096 bytes and a
  // transfer reaching its end kills QEMU 7.2.
  if (caps_.device_buffer_size == 0) caps_.device_buffer_size = 4096;
  if (caps_.max_transfer == 0 || caps_.max_transfer >= caps_.device_buffer_size)
    caps_.max_transfer = caps_.device_buffer_size - 1;
  if (trace::enabled()) {
    traced_client_ = b.client_id();
    trace::emit(trace::Kind::DeviceOpen, index_, traced_client_);
  }
}

DeviceCore::~DeviceCore() {
  // The default pool first, while the backend its segments and waits need is still here.
  default_pool_ptr_.store(nullptr, std::memory_order_relaxed);
  default_pool_.reset();
  // A child has neither the emulated engine's thread nor the right to close the parent's
  // objects: its copy of the backend is left as it is.
  if (forked()) (void)backend_.release();
}

bool DeviceCore::forked() const noexcept { return fork_generation() != fork_generation_; }

DeviceBackend& DeviceCore::backend(const char* what) const {
  if (forked()) throw_used_after_fork(std::string(what) + ": device " + std::to_string(index_));
  if (closed())
    throw DeviceLost(ENODEV, std::string(what) + ": device " + std::to_string(index_) + " is closed");
  return *backend_;
}

void DeviceCore::close() noexcept {
  closed_.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<pool::PoolCore>> live;
  {
    std::lock_guard lk(pools_m_);
    for (auto& w : pools_)
      if (auto p = w.lock()) live.push_back(std::move(p));
    pools_.clear();
  }
  for (auto& p : live) p->source_closed();
}  // a last pool reference dropped here destroys it, with no lock of ours held

void DeviceCore::watch_close(const std::shared_ptr<pool::PoolCore>& p) {
  {
    std::lock_guard lk(pools_m_);
    std::erase_if(pools_, [](const std::weak_ptr<pool::PoolCore>& w) { return w.expired(); });
    pools_.push_back(p);
  }
  if (closed()) p->source_closed();
}

// Both read without the lock: every hrtMallocAsync asks.
hostrt::Pool& DeviceCore::default_pool() {
  if (hostrt::Pool* p = default_pool_ptr_.load(std::memory_order_acquire)) return *p;
  std::lock_guard lk(mem_pool_m_);
  if (!default_pool_) {
    default_pool_ = Access::default_pool(*this);
    default_pool_ptr_.store(default_pool_.get(), std::memory_order_release);
  }
  return *default_pool_;
}

hostrt::Pool& DeviceCore::mem_pool() {
  if (hostrt::Pool* p = mem_pool_.load(std::memory_order_acquire)) return *p;
  return default_pool();
}

void DeviceCore::set_mem_pool(hostrt::Pool* p) {
  if (p != nullptr && hostrt::detail::Access::device_core(*p) != this)
    throw WrongDevice(EXDEV, "set_mem_pool: the pool is not one of device " + std::to_string(index_) + "'s");
  std::lock_guard lk(mem_pool_m_);
  mem_pool_.store(p, std::memory_order_release);
}

void DeviceCore::forget_mem_pool(const hostrt::Pool* p) noexcept {
  std::lock_guard lk(mem_pool_m_);
  if (mem_pool_.load(std::memory_order_relaxed) == p) mem_pool_.store(nullptr, std::memory_order_release);
}

void DeviceCore::add_stream(const std::shared_ptr<StreamCore>& s) {
  std::lock_guard lk(streams_m_);
  std::erase_if(streams_, [](const std::weak_ptr<StreamCore>& w) { return w.expired(); });
  streams_.push_back(s);
}

void DeviceCore::set_legacy_stream(const std::shared_ptr<StreamCore>& s) {
  std::lock_guard lk(streams_m_);
  legacy_ = s;
  has_legacy_.store(true, std::memory_order_release);
}

std::shared_ptr<StreamCore> DeviceCore::legacy_stream() const {
  if (!has_legacy_.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lk(streams_m_);
  return legacy_.lock();
}

void DeviceCore::retire(std::shared_ptr<RetiredStream> r) {
  std::vector<std::shared_ptr<RetiredStream>> done;  // destroyed after the lock (driver calls)
  std::lock_guard lk(streams_m_);
  done.reserve(retired_.size());
  retired_.reserve(retired_.size() + 1);  // the one step that may fail, before any other
  std::erase_if(retired_, [&](auto& x) {
    if (!x->done()) return false;
    done.push_back(std::move(x));  // fits: done was given room for all
    return true;
  });
  r->adopt();
  retired_.push_back(std::move(r));
}

std::vector<std::shared_ptr<RetiredStream>> DeviceCore::retired() {
  std::vector<std::shared_ptr<RetiredStream>> done, left;
  std::lock_guard lk(streams_m_);
  for (auto& x : retired_) (x->done() ? done : left).push_back(x);
  std::erase_if(retired_, [](const auto& x) { return x->done(); });
  return left;
}

bool DeviceCore::drain_retired() {
  {
    std::lock_guard lk(streams_m_);
    if (retired_.empty()) return false;
  }
  for (auto& r : retired()) {
    try {
      r->wait_quiet();
    } catch (const Error&) {  // a lost device: nothing left to wait for
    }
  }
  retired();
  return true;
}

std::vector<std::shared_ptr<StreamCore>> DeviceCore::streams() {
  std::lock_guard lk(streams_m_);
  std::vector<std::shared_ptr<StreamCore>> live;
  for (auto& w : streams_)
    if (auto s = w.lock()) live.push_back(std::move(s));
  return live;
}

// ---- Allocation ----

namespace {

// The pages wholly inside [p, p+n): those register_range marks MADV_DONTFORK. The first and
// last pages may hold unrelated data (heap neighbours) that a child must still see; a pinned
// page there stays the parent's anyway (since 5.x the kernel copies pinned anonymous pages
// for the child at fork instead of sharing them copy-on-write).
std::pair<std::uintptr_t, std::uintptr_t> whole_pages(const void* p, std::size_t n) noexcept {
  const std::size_t ps = page_size();
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  return {align_up(begin, ps), align_down(begin + n, ps)};
}

void set_fork(const void* p, std::size_t n, int advice) noexcept {
  const auto [lo, hi] = whole_pages(p, n);
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, advice);
}

}  // namespace

Allocation::~Allocation() {
  if (registered_) registry().erase(reinterpret_cast<std::uintptr_t>(bo_.ptr));
  if (peers_) peers_->release();  // before the owner's BO: the views name it
  if (type_ == MemoryType::Registered && size_ != 0) set_fork(bo_.ptr, size_, MADV_DOFORK);
  if (bo_.handle)
    if (DeviceBackend* be = dev_->backend_for_release()) be->release_bo(bo_);
}

std::vector<std::shared_ptr<DeviceCore>> Allocation::peer_devices() const {
  return peers_ ? peers_->peers() : std::vector<std::shared_ptr<DeviceCore>>{};
}

std::shared_ptr<Allocation> Allocation::create(const std::shared_ptr<DeviceCore>& dev, std::size_t bytes,
                                               unsigned flags, std::shared_ptr<const AccessList> access) {
  EXPECTS((flags & ~kHostAllocPortable) == 0, "host_alloc: unknown flags " + std::to_string(flags));
  EXPECTS(bytes > 0, "host_alloc of 0 bytes");
  EXPECTS(bytes <= SIZE_MAX - 63, "host_alloc of " + std::to_string(bytes) + " bytes overflows");
  const std::size_t rounded = (bytes + 63) & ~std::size_t{63};
  if (dev->caps().max_bo_size && rounded > dev->caps().max_bo_size)
    throw OutOfMemory(ENOMEM, "host_alloc of " + std::to_string(bytes) + " bytes: the device's limit is " +
                                  std::to_string(dev->caps().max_bo_size) + where(__FILE__, __LINE__));
  auto a = std::make_shared<Allocation>(dev, MemoryType::Pinned);
  a->bo_ = dev->backend("host_alloc").create_bo(rounded);
  a->size_ = rounded;
  if (flags & kHostAllocPortable) {
    a->peers_ =
        std::make_shared<PeerViews>(dev, MemoryType::Pinned, a->bo_.ptr, rounded, 0u, std::move(access));
    a->peers_->set_owner_handle(a->bo_.handle);
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(a->bo_.ptr);
  registry().insert({begin, begin + rounded, MemoryType::Pinned, dev.get(), dev->index(), dev->kind(),
                     a->bo_.handle, false, a->peers_});
  a->registered_ = true;
  return a;
}

std::shared_ptr<Allocation> Allocation::register_range(const std::shared_ptr<DeviceCore>& dev, void* ptr,
                                                       std::size_t bytes, unsigned flags) {
  EXPECTS(ptr != nullptr, "host_register of a null pointer");
  EXPECTS(bytes > 0, "host_register of 0 bytes");
  EXPECTS((flags & ~(kHostRegisterReadOnly | kHostRegisterPortable)) == 0,
          "host_register: unknown flags " + std::to_string(flags));
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  EXPECTS(begin + bytes > begin, "host_register: range wraps around");
  EXPECTS(!DevicePtr::from(ptr), "host_register of a device address");
  DeviceBackend& be = dev->backend("host_register");
  const bool ro = flags & kHostRegisterReadOnly;
  const std::uint32_t uapi_flags = ro ? DRM_EDU_ACCEL_BO_USERPTR_READONLY : 0u;
  auto a = std::make_shared<Allocation>(dev, MemoryType::Registered);
  if (flags & kHostRegisterPortable)
    a->peers_ = std::make_shared<PeerViews>(dev, MemoryType::Registered, ptr, bytes, uapi_flags);
  // Reserve the range before pinning so two threads cannot both pin overlapping memory; from
  // here on `a` owns the entry (made first: a throw in between would leave it behind).
  registry().insert(
      {begin, begin + bytes, MemoryType::Registered, dev.get(), dev->index(), dev->kind(), 0, ro, a->peers_});
  a->bo_.ptr = ptr;
  a->registered_ = true;
  a->bo_ = be.register_user(ptr, bytes, uapi_flags);
  a->size_ = bytes;
  if (a->peers_) a->peers_->set_owner_handle(a->bo_.handle);
  registry().set_handle(begin, a->bo_.handle);
  // The registered pages stay out of fork children (a child has no business with memory the
  // device writes into), but only the pages wholly inside the range: see whole_pages(). Best
  // effort: madvise may refuse special mappings.
  set_fork(ptr, bytes, MADV_DONTFORK);
  return a;
}

std::shared_ptr<Allocation> Allocation::import_dmabuf(const std::shared_ptr<DeviceCore>& dev, int fd) {
  EXPECTS(fd >= 0, "import_dmabuf of fd " + std::to_string(fd));
  auto a = std::make_shared<Allocation>(dev, MemoryType::Imported);
  a->bo_ = dev->backend("import_dmabuf").import_dmabuf(fd);
  a->size_ = a->bo_.size;
  const auto begin = reinterpret_cast<std::uintptr_t>(a->bo_.ptr);
  registry().insert({begin, begin + a->size_, MemoryType::Imported, dev.get(), dev->index(), dev->kind(),
                     a->bo_.handle, false, nullptr});
  a->registered_ = true;
  return a;
}

// ---- StreamCore ----

namespace {

std::uint32_t uapi_priority(StreamPriority p) {
  switch (p) {
    case StreamPriority::High:
      return DRM_EDU_ACCEL_QUEUE_PRIORITY_HIGH;
    case StreamPriority::Normal:
      return DRM_EDU_ACCEL_QUEUE_PRIORITY_NORMAL;
    case StreamPriority::Low:
      return DRM_EDU_ACCEL_QUEUE_PRIORITY_LOW;
  }
  throw InvalidArgument(EINVAL, "create_stream: unknown priority " + std::to_string(static_cast<int>(p)) +
                                    where(__FILE__, __LINE__));
}

}  // namespace

StreamCore::StreamCore(std::shared_ptr<DeviceCore> dev, StreamPriority priority)
    : StreamIdentity(g_next_stream_id++),
      dev_(std::move(dev)),
      priority_(priority),
      fork_generation_(fork_generation()) {
  const std::uint32_t uapi = uapi_priority(priority);
  DeviceBackend& be = dev_->backend("create_stream");
  try {
    try {
      queue_ = be.create_queue(uapi);
    } catch (const OutOfMemory&) {
      // Out of queues: destroyed streams' work may hold some; they come back once it ends.
      if (!dev_->drain_retired()) throw;
      queue_ = create_queue_retrying(be, uapi);
    }
  } catch (const PermissionDenied& e) {
    // EACCES has one cause at QUEUE_CREATE: say which, and what to do about it.
    throw PermissionDenied(
        e.error_code(),
        std::string("create_stream: a high-priority stream needs CAP_SYS_NICE "
                    "(run as root, or give the program the capability: setcap cap_sys_nice+ep PROGRAM); ") +
            e.what());
  }
  try {
    timeline_ = be.create_timeline();
  } catch (...) {
    be.destroy_queue(queue_.id);
    throw;
  }
  slot_ = queue_.slot;
  // For the pool's warm free (pool::StreamIdentity::idle_published).
  static_assert(kWaitsQueued == pool::StreamIdentity::kWaitsQueued);
  static_assert(std::is_same_v<decltype(slot_->completed), __u64> &&
                std::is_same_v<__u64, unsigned long long>);
  state.store(0, std::memory_order_relaxed);
  completed = &slot_->completed;
  page_generation = fork_generation_;
  trace::emit(trace::Kind::StreamCreate, stream_id, dev_->index(), queue_.id, dev_->traced_client());
}

std::shared_ptr<StreamCore> StreamCore::create(const std::shared_ptr<DeviceCore>& dev,
                                               StreamPriority priority) {
  auto s = std::make_shared<StreamCore>(dev, priority);
  pool::stream_directory().publish(pool::stream_ref(*s), s);
  dev->add_stream(s);
  return s;
}

StreamCore::~StreamCore() {
  host_funcs_owner_.reset();  // they run first: they are ordered before nothing else here
  staging_.reset();           // without waiting: queued jobs hold their own references on its BOs
  DeviceBackend* be = dev_->backend_for_release();
  const std::uint64_t last = last_submitted();
  if (be != nullptr && !reached(last)) {
    // CUDA lets the work of a destroyed stream run on: it stays watchable under our id.
    try {
      auto r = std::make_shared<RetiredStream>(dev_, stream_id, queue_, timeline_, last, reported_failed_,
                                               ordering() == Ordering::Blocking);
      dev_->retire(r);  // from here on r owns the queue and the timeline
      pool::stream_directory().replace(r->ref(), r);
      return;
    } catch (const std::bad_alloc&) {
      // No memory to leave it behind: wait for the work here instead.
      try {
        be->wait_timeline(timeline_, last);
      } catch (const Error&) {  // a lost device: its queues are gone anyway
      }
    }
  }
  pool::stream_directory().withdraw(stream_id, this);
  if (be == nullptr) return;
  be->destroy_queue(queue_.id);
  be->destroy_timeline(timeline_);
}

void StreamCore::order_implicitly() {
  const Ordering mine = ordering();
  if (mine == Ordering::NonBlocking || forked()) return;
  auto after = [this](const std::shared_ptr<StreamCore>& other) {
    other->wait_host_funcs_idle();
    const std::uint64_t p = other->last_submitted();
    if (!other->reached(p)) add_wait(other, p);
  };
  if (mine == Ordering::Blocking) {
    if (auto legacy = dev_->legacy_stream(); legacy && legacy.get() != this) after(legacy);
    return;
  }
  for (const auto& s : dev_->streams())
    if (s.get() != this && s->ordering() == Ordering::Blocking) after(s);
  // Blocking streams destroyed with work queued: their queues are no StreamCore to name as an
  // in-fence, so the host waits (rare: only until that work ends).
  for (const auto& r : dev_->retired()) {
    if (!r->blocking()) continue;
    try {
      r->wait_quiet();
    } catch (const Error&) {  // a lost device: its work runs no more
    }
  }
}

void StreamCore::add_wait(std::shared_ptr<StreamCore> other, std::uint64_t point) {
  std::lock_guard lk(m_);
  // One wait per stream, its highest point: the list is bounded by the streams, not by the
  // events waited on (a stream's points are reached in order).
  const auto same = std::find_if(pending_waits_.begin(), pending_waits_.end(),
                                 [&](const auto& w) { return w.first == other; });
  if (same != pending_waits_.end()) {
    same->second = std::max(same->second, point);
  } else {
    pending_waits_.emplace_back(std::move(other), point);
  }
  state.fetch_or(kWaitsQueued, std::memory_order_release);
}

std::vector<std::pair<std::shared_ptr<StreamCore>, std::uint64_t>> StreamCore::pending_waits() {
  std::lock_guard lk(m_);
  // A reached wait adds no in-fence at the next submit either: drop it now, and the flag with
  // the last one, so frees on this stream take the warm path again.
  std::erase_if(pending_waits_, [](const auto& w) { return w.first->reached(w.second); });
  if (pending_waits_.empty()) state.fetch_and(~kWaitsQueued, std::memory_order_release);
  return pending_waits_;
}

std::uint64_t StreamCore::submit(std::span<const CopyOp> ops) {
  drain_host_funcs();
  DeviceBackend& be = dev_->backend("submit");
  std::lock_guard lk(m_);
  std::vector<SyncPoint> in;
  // Another device's points come in as syncobjs of ours, made for this job only and
  // destroyed on every way out (once submitted, the job holds their fences).
  struct Imported {
    DeviceBackend& be;
    std::vector<std::uint32_t> handles;
    ~Imported() {
      for (std::uint32_t h : handles) be.destroy_timeline(h);
    }
  } imported{be, {}};
  for (auto& [s, point] : pending_waits_) {
    if (s->reached(point)) continue;
    // The waited stream's own file, even if its device was closed since (hrtDeviceReset):
    // its queued work still runs and is still waited for, and refusing here would fail every
    // later submit of this stream with the same wait.
    DeviceBackend& theirs = s->dev_->backend_unchecked();
    // More streams to wait for than one job may name: the host waits for the rest.
    if (in.size() == dev_->caps().max_syncs) {
      theirs.wait_timeline(s->timeline_, point);
      continue;
    }
    if (s->dev_ == dev_) {
      in.push_back({s->timeline_, DRM_EDU_ACCEL_SYNC_TIMELINE, point});
      continue;
    }
    in.reserve(in.size() + 1);
    imported.handles.reserve(imported.handles.size() + 1);
    const SyncPoint p = be.import_point(theirs, s->timeline_, point, s);
    imported.handles.push_back(p.handle);
    in.push_back(p);
  }
  const std::uint64_t expect = (state.load(std::memory_order_relaxed) & ~kWaitsQueued) + 1;
  // The stream's timeline point is the job's seqno, so waits need no translation.
  const SyncPoint out{timeline_, DRM_EDU_ACCEL_SYNC_TIMELINE, expect};
  std::uint64_t seqno = 0;
  for (;;) {
    try {
      seqno = be.submit(queue_.id, ops, in, {&out, 1});
      break;
    } catch (const SystemError& e) {
      if (e.error_code() != EBUSY) throw;
      // The driver bounds the jobs one file has in flight (max_jobs_per_file): a CUDA stream
      // never refuses work for that, so wait for one of them to end and submit again.
      wait_for_any_job(be, expect - 1);
    }
  }
  pending_waits_.clear();
  // Clears kWaitsQueued in the same store: the job carries the waits, and its point covers
  // them (a reader never sees the flag gone with the previous point).
  state.store(seqno, std::memory_order_release);
  if (seqno != expect)
    throw SystemError(EPROTO, "SUBMIT returned seqno " + std::to_string(seqno) + ", expected " +
                                  std::to_string(expect) + ": the driver breaks the 1, 2, 3... contract" +
                                  where(__FILE__, __LINE__));
  return seqno;
}

void StreamCore::wait_for_any_job(DeviceBackend& be, std::uint64_t last) {
  // Our own oldest job first (no other stream's lock is needed for it); else another stream's
  // or a destroyed stream's, whichever has work left.
  if (!reached(last)) {
    be.wait_timeline(timeline_, load_completed(slot_) + 1);
    return;
  }
  for (const auto& s : dev_->streams()) {
    if (s.get() == this) continue;
    const std::uint64_t done = load_completed(s->slot_);
    if (done < s->last_submitted()) {
      be.wait_timeline(s->timeline_, done + 1);
      return;
    }
  }
  for (const auto& r : dev_->retired()) {
    r->wait_quiet();
    return;
  }
  // Jobs of this file we do not know of (another Device::open shares no file): a short pause.
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void StreamCore::launch_host_func(std::function<void()> fn) {
  std::call_once(host_funcs_once_, [this] {
    host_funcs_owner_ = std::make_unique<HostFuncs>(*this);
    host_funcs_.store(host_funcs_owner_.get(), std::memory_order_release);
  });
  // After the functions launched before it, which may have been followed by nothing else,
  // and after what the stream waits for (Stream::wait, the NULL stream's implicit order):
  // those are ordered before the function as before a copy.
  auto waits = pending_waits();
  if (!waits.empty()) {
    fn = [waits = std::move(waits), fn = std::move(fn)] {
      for (const auto& [other, point] : waits) {
        try {
          other->wait_as_waited(point);
        } catch (const Error&) {  // as for the stream's own point: late rather than never
        }
      }
      fn();
    };
  }
  host_funcs_owner_->launch(last_submitted(), std::move(fn));
}

Staging& StreamCore::staging() {
  std::call_once(staging_once_, [this] { staging_ = std::make_unique<Staging>(*this); });
  return *staging_;
}

void StreamCore::wait(std::uint64_t point) {
  wait_until(point);
  check_failure(point);
}

void StreamCore::wait_until(std::uint64_t point) {
  const std::uint64_t last = last_submitted();
  EXPECTS(point <= last, "wait for point " + std::to_string(point) + " not submitted yet (last " +
                             std::to_string(last) + ")");
  if (!reached(point)) dev_->backend("wait").wait_timeline(timeline_, point);
}

void StreamCore::wait_as_waited(std::uint64_t point) {
  if (!reached(point)) dev_->backend_unchecked().wait_timeline(timeline_, point);
}

void StreamCore::check_failure(std::uint64_t point) {
  if (!reached(point)) return;
  const std::uint64_t failed = load_failed(slot_);
  if (failed == 0 || failed > point) return;
  const int err = -load_error(slot_);
  std::lock_guard lk(m_);
  if (failed <= reported_failed_) return;
  reported_failed_ = failed;
  const int e = err > 0 ? err : EIO;
  throw DeviceFault(e,
                    "job " + std::to_string(failed) + " of stream " + std::to_string(stream_id) +
                        " on device " + std::to_string(dev_->index()) +
                        " failed on the device: " + std::strerror(e),
                    failed);
}

}  // namespace hostrt::detail
