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
//    reserved; retain_bytes does the same automatically whenever a segment becomes
//    idle and more than retain_bytes is reserved; reserve() grows the pool up front (do
//    it at start-up, never in the steady-state loop).
//  - Thread safety: every member function may be called from any thread. Warm allocations
//    and frees whose stream has no unfinished work are served from a per-thread cache with
//    no lock and no syscall; everything else takes the pool's lock, which is never held
//    across a driver call or a wait. Blocks parked in another thread's cache are returned
//    to the pool by that thread at its next pool call after trim()/flush, or when it exits.
//  - sync_on_free (debug): deallocate waits until the block's work has completed before
//    returning, so a missing record_stream shows up as corruption right where the free is,
//    not later. A device fault of that work stays for the stream's own synchronize (or
//    query, or an event's) to report: deallocate never throws for the device.
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
// allocation once the device is closed, PoolOutOfMemory (a std::bad_alloc) as above.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "hostrt/error.hpp"
#include "hostrt/pool_fwd.hpp"
#include "hostrt/pool_options.hpp"

namespace hostrt {

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
  void set_retain_bytes(std::size_t bytes);
  std::size_t retain_bytes() const noexcept;
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

}  // namespace hostrt

// The classes that hold blocks of a Pool; included so that hostrt/pool.hpp gives the whole
// pool API, as before it was split.
#include "hostrt/pool_buffer.hpp"
#include "hostrt/pool_memory_resource.hpp"
#include "hostrt/registration_cache.hpp"
