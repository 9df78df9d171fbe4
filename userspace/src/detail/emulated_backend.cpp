#include "detail/emulated_backend.hpp"

#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/size_math.hpp"
#include "hostrt/device.hpp"
#include "hostrt/error.hpp"

namespace hostrt::detail {

namespace {

#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;  // Linux 5.14; older C libraries lack the name
#endif

// A range [off, off+size) inside limit, without overflow.
bool in_range(std::uint64_t off, std::uint64_t size, std::uint64_t limit) noexcept {
  return off <= limit && size <= limit - off;
}

// Whether the calling thread has CAP_SYS_NICE in its effective set: what the driver's
// capable(CAP_SYS_NICE) asks of the task making the ioctl. capget(2) on the calling thread
// (pid 0); hostrt does not link libcap.
bool has_cap_sys_nice() noexcept {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_SYS_NICE)].effective & CAP_TO_MASK(CAP_SYS_NICE)) != 0;
}

// The order of a uapi priority among run queues (higher runs first), or -1 if unknown.
int priority_rank(std::uint32_t priority) noexcept {
  switch (priority) {
    case DRM_EDU_ACCEL_QUEUE_PRIORITY_LOW:
      return 0;
    case DRM_EDU_ACCEL_QUEUE_PRIORITY_DEFAULT:
    case DRM_EDU_ACCEL_QUEUE_PRIORITY_NORMAL:
      return 1;
    case DRM_EDU_ACCEL_QUEUE_PRIORITY_HIGH:
      return 2;
    default:
      return -1;
  }
}

}  // namespace

struct EmulatedBackend::Bo {
  std::uint32_t handle = 0;
  unsigned char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t map_len = 0;  // owned mapping (BO_CREATE); 0 for userptr
  bool readonly = false;
  std::shared_ptr<Bo> backing;  // share_from: the owner's BO, whose memory this one names
  unsigned inflight = 0;        // jobs naming this BO that have not ended (under m_)

  ~Bo() {
    if (map_len) munmap(ptr, map_len);  // munmap also drops the mlock
  }
};

EmulatedBackend::EmulatedBackend(std::size_t index) : index_(index), slot_used_(kMaxQueues, false) {
  void* page = nullptr;
  if (posix_memalign(&page, 4096, 4096) != 0) throw std::bad_alloc();
  std::memset(page, 0, 4096);
  page_ = static_cast<Completion*>(page);
  static_assert(sizeof(Completion) * kMaxQueues <= 4096);
  engine_ = std::thread([this] { engine_loop(); });
}

EmulatedBackend::~EmulatedBackend() {
  {
    // Relays end when the other devices' points are reached; jobs here may wait for them.
    std::unique_lock lk(relays_m_);
    relays_cv_.wait(lk, [&] { return relays_active_ == 0; });
  }
  {
    std::unique_lock lk(m_);
    for (auto& [id, q] : queues_) q.held = false;
    work_cv_.notify_all();
    done_cv_.wait(lk, [&] {
      return std::all_of(queues_.begin(), queues_.end(),
                         [](const auto& kv) { return kv.second.jobs.empty(); });
    });
    stop_ = true;
    work_cv_.notify_all();
  }
  engine_.join();
  bos_.clear();
  std::free(page_);
}

std::string EmulatedBackend::name() const { return "emulated edu #" + std::to_string(index_); }

std::uint64_t EmulatedBackend::get_param(std::uint32_t param) {
  switch (param) {
    case DRM_EDU_ACCEL_PARAM_DRIVER_VERSION:
      return (DRM_EDU_ACCEL_VERSION_MAJOR << 16) | DRM_EDU_ACCEL_VERSION_MINOR;
    case DRM_EDU_ACCEL_PARAM_DMA_MASK_BITS:
      return 28;
    case DRM_EDU_ACCEL_PARAM_DEVICE_BUFFER_SIZE:
      return kDeviceBufferSize;
    case DRM_EDU_ACCEL_PARAM_MAX_TRANSFER:
      return kMaxTransfer;
    case DRM_EDU_ACCEL_PARAM_IOMMU:
      return 0;
    case DRM_EDU_ACCEL_PARAM_MAX_BO_SIZE:
      return kMaxBoSize;
    case DRM_EDU_ACCEL_PARAM_MAX_SEGMENT_SIZE:
      return 65536;
    case DRM_EDU_ACCEL_PARAM_MAX_QUEUES:
      return kMaxQueues;
    case DRM_EDU_ACCEL_PARAM_MAX_OPS:
      return kMaxOps;
    case DRM_EDU_ACCEL_PARAM_MAX_SYNCS:
      return kMaxSyncs;
    case DRM_EDU_ACCEL_PARAM_MAX_JOB_BYTES:
      return kMaxJobBytes;
    case DRM_EDU_ACCEL_PARAM_PINNED_BYTES: {
      std::lock_guard lk(m_);
      return pinned_bytes_;
    }
    default:
      throw_errno(EINVAL, "GET_PARAM " + std::to_string(param));
  }
}

BoMapping EmulatedBackend::create_bo(std::size_t bytes) {
  if (bytes == 0 || bytes > kMaxBoSize)
    throw_errno(EINVAL, "BO_CREATE of " + std::to_string(bytes) + " bytes");
  auto bo = std::make_shared<Bo>();
  bo->size = round_up(bytes, page_size());
  void* p = mmap(nullptr, bo->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw_errno(ENOMEM, "BO_CREATE: mmap of " + std::to_string(bo->size) + " bytes");
  bo->ptr = static_cast<unsigned char*>(p);
  bo->map_len = bo->size;
  // The driver's BO mappings are VM_DONTCOPY: a fork child does not get the pages (an access
  // there is a SIGSEGV, not the parent's memory shared behind its back). The same here.
  if (madvise(p, bo->size, MADV_DONTFORK) != 0) {
    const int e = errno;
    munmap(p, bo->size);
    throw_errno(e == ENOMEM ? ENOMEM : EINVAL, "BO_CREATE: madvise(MADV_DONTFORK)");
  }
  // Best effort, like the driver, which does not charge BO_CREATE to RLIMIT_MEMLOCK either:
  // an unprivileged host with a small limit still gets working (if swappable) memory.
  (void)mlock(p, bo->size);
  std::lock_guard lk(m_);
  bo->handle = next_handle_++;
  bos_[bo->handle] = bo;
  pinned_bytes_ += bo->size;
  return {bo->handle, bo->ptr, bo->size, 0};  // the mapping belongs to the Bo, not the caller
}

void EmulatedBackend::lock_pages(std::uintptr_t first, std::uintptr_t last) {
  const std::size_t ps = page_size();
  if (mlock(reinterpret_cast<void*>(first), last - first + ps) != 0)
    throw_errno(errno == EPERM ? EPERM : ENOMEM, "BO_USERPTR: mlock");
  for (std::uintptr_t pg = first; pg <= last; pg += ps) ++locked_pages_[pg];
}

void EmulatedBackend::unlock_pages(std::uintptr_t first, std::uintptr_t last) noexcept {
  const std::size_t ps = page_size();
  // mlock does not count: a page shared with another registration must stay locked.
  for (std::uintptr_t pg = first; pg <= last; pg += ps) {
    auto it = locked_pages_.find(pg);
    if (it == locked_pages_.end()) continue;
    if (--it->second == 0) {
      locked_pages_.erase(it);
      munlock(reinterpret_cast<void*>(pg), ps);
    }
  }
}

BoMapping EmulatedBackend::register_user(void* ptr, std::size_t bytes, std::uint32_t uapi_flags) {
  if (!ptr || bytes == 0 || bytes > kMaxBoSize || (uapi_flags & ~DRM_EDU_ACCEL_BO_USERPTR_FLAGS))
    throw_errno(EINVAL, "BO_USERPTR");
  const std::size_t ps = page_size();
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  if (begin + bytes < begin) throw_errno(EINVAL, "BO_USERPTR: range wraps");
  const std::uintptr_t first = begin / ps * ps, last = (begin + bytes - 1) / ps * ps;
  // The driver's pin fails with -EFAULT on unmapped pages; mincore tells us the same.
  for (std::uintptr_t pg = first; pg <= last; pg += ps) {
    unsigned char v;
    if (mincore(reinterpret_cast<void*>(pg), ps, &v) != 0)
      throw_errno(EFAULT, "BO_USERPTR: range not mapped");
  }
  // The driver pins a writable registration for writing (FOLL_WRITE), which fails with
  // -EFAULT on memory the process may not write; faulting the pages in for writing does the
  // same here (and breaks copy-on-write sharing first, as the pin does).
  if (!(uapi_flags & DRM_EDU_ACCEL_BO_USERPTR_READONLY) &&
      madvise(reinterpret_cast<void*>(first), last - first + ps, kPopulateWrite) != 0) {
    if (errno == ENOMEM) throw_errno(ENOMEM, "BO_USERPTR: populating the range");
    throw_errno(EFAULT, "BO_USERPTR: range not writable (register it read-only)");
  }
  auto bo = std::make_shared<Bo>();
  bo->ptr = static_cast<unsigned char*>(ptr);
  bo->size = bytes;
  bo->readonly = uapi_flags & DRM_EDU_ACCEL_BO_USERPTR_READONLY;
  std::lock_guard lk(m_);
  lock_pages(first, last);
  bo->handle = next_handle_++;
  bos_[bo->handle] = bo;
  pinned_bytes_ += last - first + ps;
  return {bo->handle, ptr, bytes, 0};
}

int EmulatedBackend::export_dmabuf(std::uint32_t handle) {
  throw NotSupported(EOPNOTSUPP, "dma-buf export of BO " + std::to_string(handle) +
                                     ": the emulated device's memory is this process's, not a kernel buffer "
                                     "(dma-bufs need the edu_accel driver)");
}

BoMapping EmulatedBackend::import_dmabuf(int fd) {
  throw NotSupported(EOPNOTSUPP, "dma-buf import of fd " + std::to_string(fd) +
                                     ": the emulated device cannot DMA into another driver's buffer "
                                     "(dma-bufs need the edu_accel driver)");
}

BoMapping EmulatedBackend::share_from(DeviceBackend& owner, std::uint32_t owner_handle) {
  auto* o = dynamic_cast<EmulatedBackend*>(&owner);
  if (o == nullptr) throw_errno(EINVAL, "PRIME import: the exporter is not an emulated device");
  std::shared_ptr<Bo> src;
  {
    std::lock_guard lk(o->m_);
    auto it = o->bos_.find(owner_handle);
    if (it == o->bos_.end()) throw_errno(ENOENT, "PRIME export of BO " + std::to_string(owner_handle));
    src = it->second;
  }
  // The driver refuses to export read-only registrations and the import of a userptr BO
  // gives DMA access to another process's pages; for the emulation only the memory matters.
  if (src->readonly) throw_errno(EACCES, "PRIME export of read-only BO " + std::to_string(owner_handle));
  auto bo = std::make_shared<Bo>();
  bo->ptr = src->ptr;
  bo->size = src->size;
  bo->backing = src->backing ? src->backing : src;
  std::lock_guard lk(m_);
  bo->handle = next_handle_++;
  bos_[bo->handle] = bo;
  return {bo->handle, nullptr, 0, 0};
}

void EmulatedBackend::release_bo(const BoMapping& m) noexcept {
  std::unique_lock lk(m_);
  auto it = bos_.find(m.handle);
  if (it == bos_.end()) return;
  auto bo = it->second;
  bos_.erase(it);
  if (bo->map_len || bo->backing) {
    if (bo->map_len) pinned_bytes_ -= bo->size;
    return;  // jobs keep the mapping alive through their references
  }
  done_cv_.wait(lk, [&] { return bo->inflight == 0; });
  const std::size_t ps = page_size();
  const auto begin = reinterpret_cast<std::uintptr_t>(bo->ptr);
  const std::uintptr_t first = begin / ps * ps, last = (begin + bo->size - 1) / ps * ps;
  unlock_pages(first, last);
  pinned_bytes_ -= last - first + ps;
}

QueueInfo EmulatedBackend::create_queue(std::uint32_t priority) {
  // The driver's order of checks: the priority (EINVAL, EACCES) before the slots (ENOSPC).
  const int rank = priority_rank(priority);
  if (rank < 0) throw_errno(EINVAL, "QUEUE_CREATE: priority " + std::to_string(priority));
  if (priority == DRM_EDU_ACCEL_QUEUE_PRIORITY_HIGH && !has_cap_sys_nice())
    throw_errno(EACCES, "QUEUE_CREATE");  // the driver's message (StreamCore explains)
  std::lock_guard lk(m_);
  auto free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  if (free_slot == slot_used_.end()) throw_errno(ENOSPC, "QUEUE_CREATE: all queues in use");
  *free_slot = true;
  const std::size_t slot = static_cast<std::size_t>(free_slot - slot_used_.begin());
  // A reused slot starts from zero, as the driver's does for a new queue.
  __atomic_store_n(&page_[slot].failed, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&page_[slot].error, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&page_[slot].completed, 0, __ATOMIC_RELEASE);
  const std::uint32_t id = next_queue_++;
  queues_[id].slot = slot;
  queues_[id].id = id;
  queues_[id].rank = static_cast<unsigned>(rank);
  return {id, &page_[slot]};
}

void EmulatedBackend::destroy_queue(std::uint32_t queue) noexcept {
  std::lock_guard lk(m_);
  auto it = queues_.find(queue);
  if (it == queues_.end()) return;
  it->second.destroyed = true;
  it->second.held = false;  // jobs already submitted still run
  if (it->second.jobs.empty()) {
    slot_used_[it->second.slot] = false;
    queues_.erase(it);
  }
  work_cv_.notify_all();
}

std::uint32_t EmulatedBackend::create_timeline() {
  std::lock_guard lk(m_);
  const std::uint32_t h = next_handle_++;
  timelines_[h] = std::make_shared<Timeline>();
  return h;
}

void EmulatedBackend::destroy_timeline(std::uint32_t handle) noexcept {
  std::lock_guard lk(m_);
  timelines_.erase(handle);
}

void EmulatedBackend::wait_timeline(std::uint32_t handle, std::uint64_t point) {
  std::unique_lock lk(m_);
  auto it = timelines_.find(handle);
  if (it == timelines_.end())
    throw_errno(ENOENT, "SYNCOBJ_TIMELINE_WAIT: no syncobj " + std::to_string(handle));
  auto tl = it->second;
  done_cv_.wait(lk, [&] { return tl->value >= point; });
}

std::uint32_t EmulatedBackend::hold_point(std::uint32_t timeline, std::uint64_t point) {
  std::lock_guard lk(m_);
  auto it = timelines_.find(timeline);
  if (it == timelines_.end()) throw_errno(ENOENT, "SYNCOBJ_TRANSFER: no syncobj " + std::to_string(timeline));
  const std::uint32_t h = next_handle_++;
  Hold& hold = holds_[h];
  hold.timeline = it->second;
  hold.point = point;
  if (hold.timeline->value >= point) hold.signalled_ns = monotonic_ns();  // reached meanwhile
  return h;
}

std::int64_t EmulatedBackend::held_point_time_ns(std::uint32_t hold) {
  std::unique_lock lk(m_);
  auto it = holds_.find(hold);
  if (it == holds_.end()) throw_errno(ENOENT, "held point: no syncobj " + std::to_string(hold));
  done_cv_.wait(lk, [&] { return it->second.signalled_ns >= 0; });
  return it->second.signalled_ns;
}

void EmulatedBackend::release_point_hold(std::uint32_t hold) noexcept {
  std::lock_guard lk(m_);
  holds_.erase(hold);
}

void EmulatedBackend::stamp_holds_locked() {
  std::int64_t now = -1;
  for (auto& [h, hold] : holds_) {
    if (hold.signalled_ns >= 0 || hold.timeline->value < hold.point) continue;
    if (now < 0) now = monotonic_ns();
    hold.signalled_ns = now;
  }
}

SyncPoint EmulatedBackend::import_point(DeviceBackend& other, std::uint32_t timeline, std::uint64_t point,
                                        std::shared_ptr<const void> keep) {
  if (dynamic_cast<EmulatedBackend*>(&other) == nullptr)
    throw_errno(EINVAL, "import_point: the other device is not an emulated device");
  const std::uint32_t h = create_timeline();
  std::shared_ptr<Timeline> tl;
  {
    std::lock_guard lk(m_);
    tl = timelines_.at(h);
  }
  {
    std::lock_guard lk(relays_m_);
    ++relays_active_;
  }
  try {
    std::thread([this, &other, timeline, point, tl, keep = std::move(keep)]() mutable {
      try {
        other.wait_timeline(timeline, point);
      } catch (...) {  // the point's syncobj is gone: its work is too
      }
      {
        std::lock_guard l(m_);
        tl->value = std::max<std::uint64_t>(tl->value, 1);
        stamp_holds_locked();
      }
      work_cv_.notify_all();
      done_cv_.notify_all();
      tl.reset();
      keep.reset();  // the waited stream, and its device, before this backend may go
      std::lock_guard l(relays_m_);
      --relays_active_;
      relays_cv_.notify_all();  // under the lock: the destructor cannot return before it
    }).detach();
  } catch (...) {
    std::lock_guard lk(relays_m_);
    --relays_active_;
    throw;
  }
  return {h, DRM_EDU_ACCEL_SYNC_TIMELINE, 1};  // the relay raises its timeline to 1
}

std::shared_ptr<EmulatedBackend::Bo> EmulatedBackend::bo_locked(std::uint32_t handle,
                                                                const char* role) const {
  auto it = bos_.find(handle);
  if (it == bos_.end())
    throw_errno(ENOENT, std::string("SUBMIT: no BO for ") + role + " handle " + std::to_string(handle));
  return it->second;
}

std::uint64_t EmulatedBackend::submit(std::uint32_t queue, std::span<const CopyOp> ops,
                                      std::span<const SyncPoint> in_syncs,
                                      std::span<const SyncPoint> out_syncs) {
  std::lock_guard lk(m_);
  auto qit = queues_.find(queue);
  if (qit == queues_.end() || qit->second.destroyed)
    throw_errno(ENOENT, "SUBMIT: no queue " + std::to_string(queue));
  if (ops.empty() || ops.size() > kMaxOps)
    throw_errno(EINVAL, "SUBMIT: op_count " + std::to_string(ops.size()));
  if (in_syncs.size() > kMaxSyncs || out_syncs.size() > kMaxSyncs)
    throw_errno(EINVAL, "SUBMIT: more than " + std::to_string(kMaxSyncs) + " in- or out-syncs");
  std::size_t queued = 0;
  for (const auto& [id, q] : queues_) queued += q.jobs.size();
  if (queued >= kMaxJobsPerFile)
    throw_errno(EBUSY, "SUBMIT: " + std::to_string(queued) + " jobs of this file not yet ended");
  // Everything is validated before anything is queued, as the driver does.
  Job job;
  std::uint64_t traffic = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const CopyOp& op = ops[i];
    const std::string at = "SUBMIT op " + std::to_string(i);
    if (op.flags || op.size == 0) throw_errno(EINVAL, at + ": flags or size 0");
    std::shared_ptr<Bo> src, dst;
    switch (op.type) {
      case DRM_EDU_ACCEL_OP_H2D:
        if (op.dst_handle) throw_errno(EINVAL, at + ": H2D with a destination BO");
        if (!in_range(op.dst_offset, op.size, kMaxTransfer))
          throw_errno(EINVAL, at + ": device range past max transfer");
        src = bo_locked(op.src_handle, "source");
        break;
      case DRM_EDU_ACCEL_OP_D2H:
        if (op.src_handle) throw_errno(EINVAL, at + ": D2H with a source BO");
        if (!in_range(op.src_offset, op.size, kMaxTransfer))
          throw_errno(EINVAL, at + ": device range past max transfer");
        dst = bo_locked(op.dst_handle, "destination");
        break;
      case DRM_EDU_ACCEL_OP_H2H:
        src = bo_locked(op.src_handle, "source");
        dst = bo_locked(op.dst_handle, "destination");
        break;
      default:
        throw_errno(EINVAL, at + ": type " + std::to_string(op.type));
    }
    if (src && !in_range(op.src_offset, op.size, src->size))
      throw_errno(EINVAL, at + ": source range past its BO");
    if (dst && !in_range(op.dst_offset, op.size, dst->size))
      throw_errno(EINVAL, at + ": destination range past its BO");
    if (dst && dst->readonly) throw_errno(EACCES, at + ": destination BO is read-only");
    if (src && dst) {  // as the driver: staged front to back, an upward overlap corrupts
      const unsigned char *from = src->ptr + op.src_offset, *to = dst->ptr + op.dst_offset;
      if (to > from && static_cast<std::uint64_t>(to - from) < op.size)
        throw_errno(EINVAL, at + ": destination starts inside the source");
    }
    traffic += op.type == DRM_EDU_ACCEL_OP_H2H ? 2 * op.size : op.size;
    job.ops.push_back(op);
    job.src.push_back(std::move(src));
    job.dst.push_back(std::move(dst));
  }
  if (traffic > kMaxJobBytes)
    throw_errno(EMSGSIZE, "SUBMIT: " + std::to_string(traffic) + " bytes of device traffic in one job");
  auto timeline = [&](const SyncPoint& s) {
    auto it = timelines_.find(s.handle);
    if (it == timelines_.end()) throw_errno(ENOENT, "SUBMIT: syncobj " + std::to_string(s.handle));
    // As the driver: a timeline sync names its point, a binary one none.
    if ((s.flags & ~DRM_EDU_ACCEL_SYNC_FLAGS) ||
        ((s.flags & DRM_EDU_ACCEL_SYNC_TIMELINE) != 0) != (s.point != 0))
      throw_errno(EINVAL, "SUBMIT: syncobj " + std::to_string(s.handle) + " with flags " +
                              std::to_string(s.flags) + " and point " + std::to_string(s.point));
    return std::make_pair(it->second, s.point);
  };
  for (const auto& s : in_syncs) job.in.push_back(timeline(s));
  for (const auto& s : out_syncs) job.out.push_back(timeline(s));
  for (auto& b : job.src)
    if (b) ++b->inflight;
  for (auto& b : job.dst)
    if (b) ++b->inflight;
  Queue& q = qit->second;
  job.seqno = ++q.last_seqno;
  job.ticket = next_ticket_++;
  const std::uint64_t seqno = job.seqno;
  q.jobs.push_back(std::move(job));
  work_cv_.notify_all();
  return seqno;
}

void EmulatedBackend::hold_queue(std::uint32_t queue, bool held) {
  std::lock_guard lk(m_);
  auto it = queues_.find(queue);
  if (it == queues_.end()) throw_errno(EINVAL, "hold_queue: no queue " + std::to_string(queue));
  it->second.held = held;
  work_cv_.notify_all();
}

void EmulatedBackend::wait_until_stalled() {
  std::unique_lock lk(m_);
  done_cv_.wait(lk, [&] { return !running_ && runnable_locked() == nullptr; });
}

void EmulatedBackend::fail_next_job(int negative_errno) {
  std::lock_guard lk(m_);
  fail_next_ = negative_errno;
}

EmulatedBackend::Queue* EmulatedBackend::runnable_locked() {
  Queue* best = nullptr;
  for (auto& [id, q] : queues_) {
    if (q.held || q.jobs.empty()) continue;
    const Job& j = q.jobs.front();
    const bool ready =
        std::all_of(j.in.begin(), j.in.end(), [](const auto& s) { return s.first->value >= s.second; });
    if (!ready) continue;
    // Priority first (drm_sched serves its run queues from the highest down), then age.
    if (!best || q.rank > best->rank || (q.rank == best->rank && j.ticket < best->jobs.front().ticket))
      best = &q;
  }
  return best;
}

int EmulatedBackend::run(Job& job) {
  int err = 0;
  {
    std::lock_guard lk(m_);
    std::swap(err, fail_next_);
  }
  if (!err) {
    for (std::size_t i = 0; i < job.ops.size(); ++i) {
      const CopyOp& op = job.ops[i];
      switch (op.type) {
        case DRM_EDU_ACCEL_OP_H2D:
          std::memcpy(device_buffer_ + op.dst_offset, job.src[i]->ptr + op.src_offset, op.size);
          break;
        case DRM_EDU_ACCEL_OP_D2H:
          std::memcpy(job.dst[i]->ptr + op.dst_offset, device_buffer_ + op.src_offset, op.size);
          break;
        default:  // H2H, staged through the device buffer like the driver's engine
          for (std::uint64_t done = 0; done < op.size;) {
            const std::size_t n = std::min<std::uint64_t>(kMaxTransfer, op.size - done);
            std::memcpy(device_buffer_, job.src[i]->ptr + op.src_offset + done, n);
            std::memcpy(job.dst[i]->ptr + op.dst_offset + done, device_buffer_, n);
            done += n;
          }
      }
    }
  }
  return err;
}

void EmulatedBackend::engine_loop() {
  std::unique_lock lk(m_);
  for (;;) {
    Queue* q = nullptr;
    work_cv_.wait(lk, [&] { return stop_ || (q = runnable_locked()) != nullptr; });
    if (!q) return;  // stop_ with nothing runnable: the destructor drained first
    // The job stays at the front (moved from) while it runs, so the queue and its slot live on
    // even if the queue is destroyed meanwhile.
    Job job = std::move(q->jobs.front());
    running_ = true;
    lk.unlock();
    const int err = run(job);
    lk.lock();
    running_ = false;
    // Completion is published under the lock together with the queue's bookkeeping, so whoever
    // sees it can destroy the queue and find its slot free again at once.
    Completion* slot = &page_[q->slot];
    if (err) {
      __atomic_store_n(&slot->failed, job.seqno, __ATOMIC_RELAXED);
      __atomic_store_n(&slot->error, err, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&slot->completed, job.seqno, __ATOMIC_RELEASE);
    for (auto& b : job.src)
      if (b) --b->inflight;
    for (auto& b : job.dst)
      if (b) --b->inflight;
    for (auto& [tl, point] : job.out) tl->value = std::max(tl->value, point);
    if (!job.out.empty()) stamp_holds_locked();
    q->jobs.pop_front();
    if (q->destroyed && q->jobs.empty()) {
      slot_used_[q->slot] = false;
      queues_.erase(q->id);
    }
    job = Job{};  // drop BO references before waking waiters (a userptr release may follow)
    done_cv_.notify_all();
  }
}

std::size_t emulated_device_count() {
  if (const char* n = std::getenv("HOSTRT_EMULATED_DEVICES"); n && *n) return std::strtoul(n, nullptr, 10);
  return 2;
}

std::unique_ptr<DeviceBackend> open_emulated(std::size_t index) {
  if (index >= emulated_device_count())
    throw DeviceLost(ENODEV, "no emulated device " + std::to_string(index) + " (HOSTRT_EMULATED_DEVICES)");
  return std::make_unique<EmulatedBackend>(index);
}

EmulatedBackend* emulated_backend(const hostrt::Device& device) noexcept {
  if (!hostrt::detail::Access::core(device)) return nullptr;
  return dynamic_cast<EmulatedBackend*>(&hostrt::detail::Access::core(device)->backend_unchecked());
}

}  // namespace hostrt::detail
