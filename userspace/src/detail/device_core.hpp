// The shared internals behind the public handles. Device, PinnedBuffer, Stream and Event
// hold shared_ptrs to these, so whichever handle goes last releases the kernel objects.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "detail/backend.hpp"
#include "detail/fork_guard.hpp"
#include "detail/host_funcs.hpp"
#include "detail/pool/stream_ref.hpp"
#include "detail/retired_stream.hpp"
#include "detail/staging.hpp"
#include "hostrt/types.hpp"

namespace hostrt {
class Pool;
}

namespace hostrt::detail {

class StreamCore;
class PeerViews;
class AccessList;
namespace pool {
class PoolCore;
}

class DeviceCore : public std::enable_shared_from_this<DeviceCore> {
 public:
  DeviceCore(std::unique_ptr<DeviceBackend> backend, std::size_t index, Backend kind);
  ~DeviceCore();

  // The backend, or DeviceLost naming `what` once the device is closed.
  DeviceBackend& backend(const char* what) const;
  // For releases, which must work after close. nullptr in a child process after fork(): the
  // parent's objects are not the child's to release (see detail/fork_guard.hpp).
  DeviceBackend* backend_for_release() const noexcept { return forked() ? nullptr : backend_.get(); }
  // The backend whatever the state (test hooks).
  DeviceBackend& backend_unchecked() const noexcept { return *backend_; }
  // True in a child process forked after this device was opened.
  bool forked() const noexcept;

  std::size_t index() const noexcept { return index_; }
  // The driver's client id of this open file when tracing (HOSTRT_TRACE), else 0.
  std::uint64_t traced_client() const noexcept { return traced_client_; }
  Backend kind() const noexcept { return kind_; }
  const Capabilities& caps() const noexcept { return caps_; }
  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  // Marks the device closed and tells the pools watching it (they refuse allocations then).
  void close() noexcept;
  // A pool whose segments come from this device; told at close (at once if closed already).
  void watch_close(const std::shared_ptr<pool::PoolCore>& p);

  // The device's default pool (cudaDeviceGetDefaultMemPool): made on first use, owned here
  // and destroyed with these internals (its segments do not keep them alive).
  hostrt::Pool& default_pool();
  // The pool allocations without one go to (cudaDeviceGetMemPool): default_pool() unless
  // set_mem_pool named another; a pool that is destroyed stops being it.
  hostrt::Pool& mem_pool();
  // nullptr: the default pool again. WrongDevice for a pool of another device.
  void set_mem_pool(hostrt::Pool* p);
  // From ~Pool: if p is the current pool, the default one is again.
  void forget_mem_pool(const hostrt::Pool* p) noexcept;

  // The C API's NULL stream of this device (CUDA's legacy default stream), once made; set
  // once per device (the stream is made Legacy first).
  void set_legacy_stream(const std::shared_ptr<StreamCore>& s);
  std::shared_ptr<StreamCore> legacy_stream() const;

  void add_stream(const std::shared_ptr<StreamCore>& s);
  // Live streams, for device-wide synchronisation.
  std::vector<std::shared_ptr<StreamCore>> streams();
  // A stream destroyed with work still queued: listed until that work is reached. On
  // std::bad_alloc nothing changed and r does not own the queue.
  void retire(std::shared_ptr<RetiredStream> r);
  // Destroyed streams whose work is not seen reached yet (drops the others), for device-wide
  // synchronisation.
  std::vector<std::shared_ptr<RetiredStream>> retired();
  // Waits for every destroyed stream's work and drops it: their queues count against the
  // driver's limit (a stream creation refused for want of one retries after this). False
  // when there was none.
  bool drain_retired();

 private:
  std::unique_ptr<DeviceBackend> backend_;
  std::size_t index_;
  Backend kind_;
  Capabilities caps_;
  std::atomic<bool> closed_{false};
  std::uint64_t fork_generation_;
  std::uint64_t traced_client_ = 0;
  mutable std::mutex streams_m_;
  std::vector<std::weak_ptr<StreamCore>> streams_;
  std::vector<std::shared_ptr<RetiredStream>> retired_;  // under streams_m_
  std::weak_ptr<StreamCore> legacy_;                     // under streams_m_
  std::atomic<bool> has_legacy_{false};                  // legacy_ was set
  std::mutex pools_m_;
  std::vector<std::weak_ptr<pool::PoolCore>> pools_;
  std::mutex mem_pool_m_;  // writers of the three below
  std::unique_ptr<hostrt::Pool> default_pool_;
  std::atomic<hostrt::Pool*> default_pool_ptr_{nullptr};  // default_pool_, once made
  std::atomic<hostrt::Pool*> mem_pool_{nullptr};          // nullptr: the default pool
};

// One BO known to the registry; releases both on destruction.
class Allocation {
 public:
  Allocation(std::shared_ptr<DeviceCore> dev, MemoryType type) : dev_(std::move(dev)), type_(type) {}
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation();

  // host_alloc / host_register: the whole construction, registry entry included.
  // flags: kHostAllocPortable / kHostRegisterReadOnly, kHostRegisterPortable. access: for a
  // pool's portable segments, the devices its pool lets use them (null: every device).
  static std::shared_ptr<Allocation> create(const std::shared_ptr<DeviceCore>& dev, std::size_t bytes,
                                            unsigned flags = 0,
                                            std::shared_ptr<const AccessList> access = nullptr);
  static std::shared_ptr<Allocation> register_range(const std::shared_ptr<DeviceCore>& dev, void* ptr,
                                                    std::size_t bytes, unsigned flags);
  // Device::import_dmabuf: the dma-buf behind fd as a BO of dev, mapped (the caller keeps fd).
  static std::shared_ptr<Allocation> import_dmabuf(const std::shared_ptr<DeviceCore>& dev, int fd);

  void* data() const noexcept { return bo_.ptr; }
  std::size_t size() const noexcept { return size_; }
  std::uint32_t handle() const noexcept { return bo_.handle; }
  MemoryType type() const noexcept { return type_; }
  const std::shared_ptr<DeviceCore>& device() const noexcept { return dev_; }
  bool portable() const noexcept { return peers_ != nullptr; }
  // The other devices that used this portable memory (empty when it is not portable).
  std::vector<std::shared_ptr<DeviceCore>> peer_devices() const;

 private:
  std::shared_ptr<DeviceCore> dev_;
  MemoryType type_;
  std::shared_ptr<PeerViews> peers_;  // portable memory only
  BoMapping bo_;
  std::size_t size_ = 0;
  bool registered_ = false;  // holds a registry entry at bo_.ptr
};

// Shared: Stream handles, cross-stream waits, and the pool's pending frees hold it.
class StreamCore : public pool::StreamIdentity, public std::enable_shared_from_this<StreamCore> {
 public:
  // PermissionDenied for High without CAP_SYS_NICE. Use create().
  explicit StreamCore(std::shared_ptr<DeviceCore> dev, StreamPriority priority = StreamPriority::Normal);
  // A new stream, listed on its device and in the stream directory.
  static std::shared_ptr<StreamCore> create(const std::shared_ptr<DeviceCore>& dev,
                                            StreamPriority priority = StreamPriority::Normal);
  // Destroys the queue and its timeline; or, with work still queued, hands them to a
  // RetiredStream on the device that does so once the work is reached.
  ~StreamCore();

  std::uint64_t id() const noexcept { return stream_id; }
  StreamPriority priority() const noexcept { return priority_; }
  const std::shared_ptr<DeviceCore>& device() const noexcept { return dev_; }
  // The stream's state word: the last seqno submitted, with kWaitsQueued set while add_wait
  // has queued waits for the next submit that were not seen reached yet. One word, so that
  // the pool's free path reads both in one load (a free on a stream that waits for an event
  // is ordered after that event too: CUDA's event dependencies).
  static constexpr std::uint64_t kWaitsQueued = std::uint64_t{1} << 63;
  std::uint64_t state_word() const noexcept { return state.load(std::memory_order_acquire); }
  std::uint64_t last_submitted() const noexcept { return state_word() & ~kWaitsQueued; }
  // Reads the completion page: never in a fork child, where it is not mapped (check forked()).
  bool reached(std::uint64_t point) const noexcept { return point == 0 || load_completed(slot_) >= point; }
  // True in a child process forked after this stream was made (one load, for hot paths).
  bool forked() const noexcept { return current_fork_generation() != fork_generation_; }

  // CUDA's stream kinds, for the implicit order of the legacy default stream (the C API's
  // NULL stream): work on the Legacy stream follows all earlier work of the device's Blocking
  // streams, and theirs follows its earlier work; NonBlocking streams take no part. Streams
  // are Blocking when made; only the C API asks for the order (order_implicitly).
  enum class Ordering : std::uint8_t { Blocking, NonBlocking, Legacy };
  Ordering ordering() const noexcept { return ordering_.load(std::memory_order_relaxed); }
  // Before the stream is shared (the C API's handle or NULL-stream entry).
  void set_ordering(Ordering o) noexcept { ordering_.store(o, std::memory_order_relaxed); }
  // Queues (add_wait) the implicit order's waits for the next work on this stream: for the
  // Legacy stream, every Blocking stream's last point not reached yet; for a Blocking one,
  // the Legacy stream's. Their host functions are waited for on the host first (the device
  // cannot wait for them; see HostFuncs), their errors left to them. Nothing for NonBlocking,
  // or in a fork child (the call after it reports UsedAfterFork). One load when the device
  // has no Legacy stream.
  void order_implicitly();
  // Queues one job with the dependencies added by add_wait; returns its seqno.
  std::uint64_t submit(std::span<const CopyOp> ops);
  void add_wait(std::shared_ptr<StreamCore> other, std::uint64_t point);
  // The waits add_wait queued for the next submit, those not yet reached (Event::record, and
  // what a free on this stream must also wait for). Drops the reached ones.
  std::vector<std::pair<std::shared_ptr<StreamCore>, std::uint64_t>> pending_waits();
  std::uint32_t queue_id() const noexcept { return queue_.id; }
  std::uint32_t timeline() const noexcept { return timeline_; }
  // Blocks until `point` ended, then reports a failure up to it.
  void wait(std::uint64_t point);
  // Blocks until `point` ended; a failure stays for wait()/check_failure to report.
  void wait_until(std::uint64_t point);
  // Blocks until `point` ended, as another stream waiting for it does: through this stream's
  // own file even once its device is closed (its queued work still runs), never reporting a
  // failure (that stays this stream's to report).
  void wait_as_waited(std::uint64_t point);
  // Throws DeviceFault when a job up to `point` (already reached) failed and was not reported.
  void check_failure(std::uint64_t point);
  // The pinned memory pageable copies on this stream are staged through (made on first use).
  Staging& staging();

  // Runs fn on the stream's host-function thread once the work submitted so far has ended.
  void launch_host_func(std::function<void()> fn);
  // Called by everything that orders work after the host functions (submit, Event::record,
  // stream-ordered frees, synchronize): waits until those launched so far have returned, and
  // rethrows what one of them threw. One load when there are none.
  void drain_host_funcs() {
    if (HostFuncs* h = host_funcs_.load(std::memory_order_acquire); h != nullptr && h->needs_drain())
      h->drain();
  }
  // Whether drain_host_funcs() has anything to do (one load when no function was launched).
  bool host_funcs_need_drain() const noexcept {
    const HostFuncs* h = host_funcs_.load(std::memory_order_acquire);
    return h != nullptr && h->needs_drain();
  }
  // Blocks until the host functions launched so far on this stream have returned, leaving
  // their errors to this stream (HostFuncs::wait_idle). One load when there are none.
  void wait_host_funcs_idle() {
    if (HostFuncs* h = host_funcs_.load(std::memory_order_acquire); h != nullptr && h->queued())
      h->wait_idle();
  }
  // Host functions queued or running.
  bool host_funcs_queued() const noexcept {
    const HostFuncs* h = host_funcs_.load(std::memory_order_acquire);
    return h != nullptr && h->queued();
  }

 private:
  // The file has as many jobs in flight as the driver allows: blocks until one of them ended.
  // `last`: this stream's last submitted point. Called under m_.
  void wait_for_any_job(DeviceBackend& be, std::uint64_t last);

  std::shared_ptr<DeviceCore> dev_;
  StreamPriority priority_;
  std::uint64_t fork_generation_;
  QueueInfo queue_;
  std::uint32_t timeline_ = 0;
  const Completion* slot_ = nullptr;
  std::atomic<Ordering> ordering_{Ordering::Blocking};
  std::mutex m_;  // submissions, pending waits, failure reporting
  // Waits for the next submit; holding the streams keeps their timelines alive until then.
  std::vector<std::pair<std::shared_ptr<StreamCore>, std::uint64_t>> pending_waits_;
  std::uint64_t reported_failed_ = 0;
  std::once_flag staging_once_;
  std::unique_ptr<Staging> staging_;  // destroyed first: its segments need the device
  std::once_flag host_funcs_once_;
  std::unique_ptr<HostFuncs> host_funcs_owner_;  // ~StreamCore runs what is queued first
  std::atomic<HostFuncs*> host_funcs_{nullptr};
};

}  // namespace hostrt::detail
