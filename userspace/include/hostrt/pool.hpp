// Pool: a caching pool of pinned host memory with stream-ordered frees.
//
// Semantics (the contract; Documentation/pool.md explains the design behind it):
//
//  - allocate(bytes, stream) returns pinned, DMA-mapped host memory from the pool's device,
//    64-byte aligned, its size rounded up to a multiple of 64 bytes and no further (no
//    power-of-two rounding). The host may read and write it as soon as allocate returns.
//    `stream` becomes the block's home stream: the one deallocate(p) frees it on.
//  - deallocate(p, stream) returns the block to the pool at once, but the block is handed
//    out again only after the host has observed the completion of all device work that may
//    use it: everything submitted before the call on `stream`, on the block's home stream,
//    and on every stream named by record_stream(p, other). A memcpy_async naming any byte
//    of the block records its stream so (as PyTorch's copy_ does): only work that reaches
//    the block otherwise (a raw handle, another process) needs record_stream.
//    Completion is read from the driver's completion page (no syscall). Work submitted on
//    those streams after deallocate must not use the block.
//  - Pending frees are queued per stream in submission order, so a slow stream delays only
//    the blocks freed on it.
//  - A request the cache cannot serve first reclaims completed pending blocks, then grows the
//    pool from the driver. Requests of up to 1 MiB grow it by segments of geometrically
//    growing size (by min_segment_bytes/16 when the small segments are already more than a
//    sixteenth free: that miss is fragmentation); a larger request gets a dedicated segment
//    of its own exact size, which is never split and is reused whole by a later request that
//    wastes at most an eighth of it. Idle segments that cannot serve a miss stay cached as
//    long as growing keeps the pool under its high-water mark of reserved bytes, and are
//    returned to the driver first otherwise. When growing would pass max_bytes (or the
//    driver refuses), the pool returns idle segments, then waits for its oldest pending
//    work, and only then throws PoolOutOfMemory, which carries the pool's statistics.
//  - Blocks are split from segments by best fit over a size-ordered index and coalesced with
//    free neighbours when freed. Requests of up to 1 MiB and larger ones use separate
//    segments, so small blocks do not fragment the large segments. reserve() segments are
//    shared by best fit like any other, not dedicated.
//  - trim(keep_bytes) returns idle segments to the driver while at least keep_bytes stay
//    reserved; release_threshold does the same automatically whenever a segment becomes
//    idle and more than the threshold is reserved; reserve() grows the pool up front (do
//    it at start-up, never in the steady-state loop).
//  - Thread safety: every member function may be called from any thread. Warm allocations
//    and frees whose stream has no unfinished work are served from a per-thread cache with
//    no lock and no syscall; everything else takes the pool's lock, which is never held
//    across a driver call or a wait. Blocks parked in another thread's cache are returned
//    to the pool by that thread at its next pool call after trim()/flush, or when it exits.
//  - sync_on_free (debug): deallocate waits until the block's work has completed (and
//    reports a device fault of that work) before returning, so a missing record_stream shows
//    up as corruption right where the free is, not later.
//  - Streams: the pool refers to a stream's internals, not to the Stream handle, so a handle
//    may be moved at any time. A free waiting on a stream keeps that stream alive itself, so
//    a Stream may be destroyed right after the free, and record_stream keeps the recorded
//    stream alive until the block's free. The stream a block was allocated on may be
//    destroyed while the block is held (as in CUDA): its queued work still runs and a later
//    free still waits for it (a destroyed stream's work stays watchable until reached), and
//    a new stream, even one at the same address, is never taken for it.
//  - Threads: allocate, deallocate and the whole-pool calls may race freely. On one block,
//    record_stream may be called from several threads at once; deallocate must not race
//    another call on the same block (the caller orders the free after its records, as
//    with any free).
//  - Destroying the pool waits for all pending work, then returns every segment; blocks
//    still held by the user become invalid.
//
//  - Thread and process exit: objects destroyed after a thread's pool state (thread_locals
//    made before the thread first used the pool, static destructors) may still use the pool;
//    they go through a shared, lock-protected exit cache.
//  - deallocate either frees or, when it throws, changes nothing (the block stays allocated).
//  - max_bytes is a hard limit: segments being allocated by other threads count against it.
//
// Errors: InvalidArgument for a pointer the pool did not hand out (or freed twice, as far
// as it can tell), WrongDevice for a stream of another device without access (set_access), DeviceLost for an
// allocation once the device is closed, PoolOutOfMemory (a std::bad_alloc) as above, DeviceFault from
// sync_on_free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <memory_resource>
#include <span>
#include <string>
#include <utility>

#include "hostrt/error.hpp"

namespace hostrt {

class Device;
class Stream;

namespace detail {
class StreamCore;
class DeviceCore;
class AccessList;
struct Access;
}  // namespace detail

namespace detail::pool {
class PoolCore;
class SegmentSource;
class RegistrationIndex;
}  // namespace detail::pool

struct PoolOptions {
  // Upper bound on reserved (pinned) bytes.
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
  // Idle reserved memory above this is returned to the driver as segments become idle.
  std::size_t release_threshold = std::numeric_limits<std::size_t>::max();
  // Per-thread cache budget for blocks of up to 1 MiB; 0 disables the caches. Cached blocks
  // cannot coalesce, so a large budget costs memory (4 MiB reserved 1.195x the peak on the
  // small-block trace of pool_bench, 1 MiB 1.124x, before the fragmentation step) and buys
  // no speed.
  std::size_t thread_cache_bytes = std::size_t{1} << 20;
  // Smallest geometric step for blocks of up to 1 MiB; a fragmented miss grows by a
  // sixteenth of it. Larger blocks get segments of their own size.
  std::size_t min_segment_bytes = std::size_t{2} << 20;
  // Large blocks (over 1 MiB) share geometrically sized segments, split by best fit, instead
  // of each getting a segment of its own: fewer driver calls when large sizes drift, more
  // memory (pool_bench traces, driver calls and reserved / peak requested: growing 1408 and
  // 1.10x against 4457 and 1.03x; random 119 and 1.19x against 1360 and 1.07x).
  // reserve() segments are shared either way.
  bool shared_large_segments = false;
  // Debug: deallocate waits for the block's device work (see the class comment).
  bool sync_on_free = false;
};

// A snapshot; exact when no other thread is using the pool at the time of the call.
struct PoolStats {
  std::size_t reserved_bytes = 0;  // held from the driver, in segments
  std::size_t peak_reserved_bytes = 0;
  std::size_t allocated_bytes = 0;  // held by users, rounded sizes
  std::size_t requested_bytes = 0;  // held by users, as requested
  // High-water marks of the two above, updated by every allocation that takes the pool's lock
  // (a thread-cache miss): exact with thread_cache_bytes = 0, a lower bound of the true peak
  // otherwise.
  std::size_t peak_allocated_bytes = 0;
  std::size_t peak_requested_bytes = 0;
  std::size_t pending_free_bytes = 0;  // freed, waiting for device work
  std::size_t cached_bytes = 0;        // free, parked in per-thread caches
  std::size_t free_bytes = 0;          // free in the pool's segments
  std::size_t segments = 0;
  std::size_t small_segments = 0;
  std::size_t large_segments = 0;
  std::uint64_t allocations = 0;
  std::uint64_t deallocations = 0;
  std::uint64_t hits = 0;               // allocations served without a driver call
  std::uint64_t misses = 0;             // segments allocated from the driver
  std::uint64_t frees_waited = 0;       // frees whose block had to wait for device work
  std::uint64_t waits = 0;              // times the pool blocked on a stream
  std::uint64_t segments_released = 0;  // segments returned to the driver

  std::string to_string() const;
};

class PoolOutOfMemory : public OutOfMemory {
 public:
  PoolOutOfMemory(const std::string& message, const PoolStats& stats)
      : OutOfMemory(12 /* ENOMEM */, message), stats_(stats) {}
  const PoolStats& stats() const noexcept { return stats_; }

 private:
  PoolStats stats_;
};

class PoolBuffer;

class Pool {
 public:
  // Segments come from device.host_alloc. The pool keeps the device's internals alive, so the
  // Device object itself may go first. DeviceLost if the device is closed. Once it is closed
  // (Device::close, hrtDeviceReset), allocate() and reserve() throw DeviceLost; blocks stay
  // valid, and frees, record_stream, trim, stats and synchronize keep working.
  // allocate/deallocate/record_stream on a stream of another device throw WrongDevice.
  explicit Pool(Device& device, PoolOptions options = {});
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  // Blocks of PoolBuffers and PoolMemoryResources stay valid past it (they hold the pool's
  // internals); raw allocate() blocks must be freed first: nothing can free them afterwards.
  ~Pool();

  void* allocate(std::size_t bytes, Stream& stream);
  // No home stream: deallocate(p) then waits only for record_stream streams.
  void* allocate(std::size_t bytes);
  void deallocate(void* p, Stream& stream);
  // Frees on the block's home stream.
  void deallocate(void* p);
  void record_stream(void* p, Stream& stream);
  // allocate() wrapped in a handle that frees on `stream` when it goes.
  PoolBuffer allocate_buffer(std::size_t bytes, Stream& stream);
  // The usable size of an allocated block: the request rounded up to 64 bytes.
  std::size_t block_size(const void* p) const;

  // Grows the pool so that a large-request segment of large_bytes and a small-request
  // segment of small_bytes are free (0: none of that class).
  void reserve(std::size_t large_bytes, std::size_t small_bytes = 0);
  // Returns idle segments to the driver, keeping at least keep_bytes reserved; flushes the
  // calling thread's cache and asks other threads to flush theirs. Returns bytes released.
  std::size_t trim(std::size_t keep_bytes = 0);
  void set_release_threshold(std::size_t bytes);
  std::size_t release_threshold() const noexcept;
  // Waits for all work pending frees wait for, then makes those blocks reusable.
  void synchronize();
  // Returns the calling thread's cached blocks to the pool.
  void flush_thread_cache();
  PoolStats stats() const;
  // Restarts the peaks of PoolStats from the current values. The peak of reserved bytes is
  // also the growth policy's high-water mark (idle segments are kept while growing stays
  // under it), so this lets a pool that once peaked high shrink back on its next misses.
  void reset_peak_stats();

  // cudaMemPoolSetAccess: lets the streams of another device (another Device::open, even
  // of the same index, counts as another device) allocate, free and record_stream the pool's
  // blocks and copy to and from them: its segments are portable memory (kHostAllocPortable),
  // imported by that device at its first copy. A block's reuse then waits for the work of
  // every stream of every device that used it. Revoking refuses such streams and copies from
  // then on; work already queued completes. The pool's own device always has access
  // (InvalidArgument to revoke it); WrongDevice for a device of another backend;
  // InvalidArgument for a pool without a device.
  void set_access(const Device& device, bool enabled);
  bool has_access(const Device& device) const;

 private:
  friend struct detail::Access;
  // Segments from any source (tests, or memory pinned some other way), made through the
  // runtime's internal access.
  Pool(std::unique_ptr<detail::pool::SegmentSource> source, PoolOptions options);
  bool serves(const std::shared_ptr<detail::DeviceCore>& device) const;
  friend class PoolBuffer;
  friend class PoolMemoryResource;
  // serves(), for handles that outlive the Pool: its own device, or one the list allows.
  static bool serves(const detail::DeviceCore* own, const detail::AccessList* access,
                     const std::shared_ptr<detail::DeviceCore>& device);
  struct DefaultPoolTag {};
  // A device's default pool, owned by the device's internals (which it does not keep alive).
  Pool(DefaultPoolTag, detail::DeviceCore& device);
  void attach(detail::DeviceCore* device);

  std::shared_ptr<detail::AccessList> access_;  // before core_: its segment source holds it
  std::shared_ptr<detail::pool::PoolCore> core_;
  detail::DeviceCore* device_ = nullptr;
};

// One block of a Pool, freed on its stream when the handle goes. Movable. It holds the
// stream's internals, not the Stream handle, and the pool's internals, not the Pool: either
// may be moved or destroyed first (the block stays valid until the handle frees it, as
// cudaMemPoolDestroy leaves blocks valid until they are freed).
class PoolBuffer {
 public:
  PoolBuffer() noexcept = default;
  PoolBuffer(Pool& pool, void* p, std::size_t bytes, Stream& stream) noexcept;
  PoolBuffer(PoolBuffer&& o) noexcept;
  PoolBuffer& operator=(PoolBuffer&& o) noexcept;
  PoolBuffer(const PoolBuffer&) = delete;
  PoolBuffer& operator=(const PoolBuffer&) = delete;
  ~PoolBuffer() { reset(); }

  void* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(ptr_), size_}; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }
  void record_stream(Stream& other);
  // Frees now (stream-ordered, as Pool::deallocate). Never throws: a failure (only possible
  // with sync_on_free, a device fault) is dropped; call Pool::deallocate to see it.
  void reset() noexcept;
  // Gives up ownership without freeing.
  void* release() noexcept;

 private:
  // A device owns its default pool: held first, so that it goes after the pool's core.
  std::shared_ptr<const void> keep_device_;
  std::shared_ptr<detail::pool::PoolCore> core_;
  std::shared_ptr<const detail::AccessList> access_;  // for record_stream's check
  const detail::DeviceCore* device_ = nullptr;        // the pool's own device
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
  std::shared_ptr<detail::StreamCore> stream_;
};

// std::pmr adaptor, so containers can live in pinned memory:
//   hostrt::PoolMemoryResource mr(pool, stream);
//   std::pmr::vector<float> v(&mr);
// Frees are stream-ordered on `stream` (or have no stream when constructed without one). The
// resource holds the stream's and the pool's internals, so the Stream handle and the Pool may
// be moved or destroyed first: frees then still work, and allocations throw InvalidArgument
// (a destroyed pool hands out nothing more).
// Alignments up to 64 are honoured; larger ones throw InvalidArgument.
class PoolMemoryResource : public std::pmr::memory_resource {
 public:
  explicit PoolMemoryResource(Pool& pool, Stream* stream = nullptr) noexcept;

 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override;
  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override;

  std::shared_ptr<const void> keep_device_;  // as PoolBuffer's: destroyed after the core
  std::shared_ptr<detail::pool::PoolCore> core_;
  std::shared_ptr<const detail::AccessList> access_;
  const detail::DeviceCore* device_ = nullptr;
  std::shared_ptr<detail::StreamCore> stream_;  // empty: no stream
};

// A cache in front of Device::host_register: registering a range that lies inside a range
// already registered through the cache costs no ioctl, only a reference. Released
// registrations stay cached (idle) until evict()/trim or until a new registration overlaps
// them; an overlap with a range still in use throws AlreadyRegistered. A RegisteredRange
// shares the cache's index, so it may outlive the RegistrationCache object.
class RegisteredRange;

class RegistrationCache {
 public:
  // flags as for Device::host_register. Keeps the device's internals alive, like Pool.
  explicit RegistrationCache(Device& device, unsigned flags = 0);
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;
  ~RegistrationCache();

  RegisteredRange acquire(void* ptr, std::size_t bytes);
  // Unregisters every idle range; returns how many.
  std::size_t evict_idle();
  std::size_t registrations() const;  // distinct registered ranges (ioctl-backed)
  std::uint64_t hits() const;         // acquires served without an ioctl
  std::uint64_t misses() const;       // acquires that registered

 private:
  friend struct detail::Access;
  std::shared_ptr<detail::pool::RegistrationIndex> index_;
};

class RegisteredRange {
 public:
  RegisteredRange() noexcept = default;
  RegisteredRange(RegisteredRange&& o) noexcept;
  RegisteredRange& operator=(RegisteredRange&& o) noexcept;
  RegisteredRange(const RegisteredRange&) = delete;
  RegisteredRange& operator=(const RegisteredRange&) = delete;
  ~RegisteredRange() { reset(); }

  void* data() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  // GEM handle of the registration covering this range.
  std::uint32_t handle() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return index_ != nullptr; }
  void reset() noexcept;

 private:
  friend class RegistrationCache;
  RegisteredRange(std::shared_ptr<detail::pool::RegistrationIndex> index, std::uintptr_t key, void* ptr,
                  std::size_t bytes, std::uint32_t handle) noexcept
      : index_(std::move(index)), key_(key), ptr_(ptr), bytes_(bytes), handle_(handle) {}

  std::shared_ptr<detail::pool::RegistrationIndex> index_;
  std::uintptr_t key_ = 0;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::uint32_t handle_ = 0;
};

}  // namespace hostrt
