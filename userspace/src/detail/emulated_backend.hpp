// An in-process edu_accel: the UAPI contract without the kernel, for hosts without the
// driver. Same validation and errno values as the driver, a 4096-byte device buffer with the
// 4095-byte transfer limit, mlock'ed memory for BOs, and one engine thread that runs jobs
// asynchronously: in order within a queue; across queues, among the queues whose next job is
// ready (its in-syncs signalled, its queue not held by a test), the highest priority first
// (HIGH, NORMAL, LOW: the driver's drm_sched run queues), then the oldest submission.
// HIGH needs CAP_SYS_NICE in the calling thread's effective set (EACCES), as the driver's.
//
// Differences from the driver, by necessity: BOs are not DMA-mapped; releasing a userptr BO
// waits for the jobs that name it, since the process cannot keep the user's pages alive.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "detail/backend.hpp"

namespace hostrt {
class Device;
}

namespace hostrt::detail {

class EmulatedBackend final : public DeviceBackend {
 public:
  static constexpr std::size_t kDeviceBufferSize = 4096;
  static constexpr std::size_t kMaxTransfer = 4095;
  static constexpr std::size_t kMaxBoSize = 256u << 20;
  static constexpr unsigned kMaxQueues = 63;  // 64-byte slots before the file status, as the driver
  static constexpr unsigned kMaxOps = 64;
  static constexpr unsigned kMaxSyncs = 16;
  static constexpr std::uint64_t kMaxJobBytes = 16ull << 20;  // the driver's max_job_mib default
  static constexpr std::size_t kMaxJobsPerFile = 256;         // the driver's max_jobs_per_file

  explicit EmulatedBackend(std::size_t index);
  ~EmulatedBackend() override;  // lets submitted jobs finish, then stops the engine

  std::string name() const override;
  std::uint64_t get_param(std::uint32_t param) override;
  BoMapping create_bo(std::size_t bytes) override;
  BoMapping register_user(void* ptr, std::size_t bytes, std::uint32_t uapi_flags) override;
  void release_bo(const BoMapping& bo) noexcept override;
  // No kernel object to share: NotSupported, saying so.
  int export_dmabuf(std::uint32_t handle) override;
  BoMapping import_dmabuf(int fd) override;
  // Another emulated device's BO, as the driver's PRIME would give it: a handle here to the
  // same memory, kept alive by the view (never unlocked or charged here).
  BoMapping share_from(DeviceBackend& owner, std::uint32_t owner_handle) override;
  QueueInfo create_queue(std::uint32_t priority) override;
  void destroy_queue(std::uint32_t queue) noexcept override;
  std::uint32_t create_timeline() override;
  void destroy_timeline(std::uint32_t handle) noexcept override;
  void wait_timeline(std::uint32_t handle, std::uint64_t point) override;
  // Stamped by the engine (or a relay) when it raises the timeline to the point.
  std::uint32_t hold_point(std::uint32_t timeline, std::uint64_t point) override;
  std::int64_t held_point_time_ns(std::uint32_t hold) override;
  void release_point_hold(std::uint32_t hold) noexcept override;
  // A relay thread waits on the other device and signals a new timeline of ours.
  SyncPoint import_point(DeviceBackend& other, std::uint32_t timeline, std::uint64_t point,
                         std::shared_ptr<const void> keep) override;
  std::uint64_t submit(std::uint32_t queue, std::span<const CopyOp> ops, std::span<const SyncPoint> in_syncs,
                       std::span<const SyncPoint> out_syncs) override;

  // Test hooks. A held queue's jobs stay pending until released (a slow device on demand).
  void hold_queue(std::uint32_t queue, bool held);
  // Blocks until the engine has nothing it may run: every pending job is held or waits for
  // an in-sync. Lets a test observe "this job would have run by now" without timing.
  void wait_until_stalled();
  // The next job the engine runs fails with this negative errno instead of copying.
  void fail_next_job(int negative_errno);

 private:
  struct Bo;
  struct Timeline {
    std::uint64_t value = 0;
  };
  struct Hold {
    std::shared_ptr<Timeline> timeline;
    std::uint64_t point = 0;
    std::int64_t signalled_ns = -1;
  };
  struct Job {
    std::uint64_t seqno = 0;
    std::uint64_t ticket = 0;
    std::vector<CopyOp> ops;
    std::vector<std::shared_ptr<Bo>> src, dst;  // per op; null for the device buffer
    std::vector<std::pair<std::shared_ptr<Timeline>, std::uint64_t>> in, out;
  };
  struct Queue {
    std::uint32_t id = 0;
    std::size_t slot = 0;
    unsigned rank = 1;  // LOW 0, NORMAL 1, HIGH 2: the engine takes the highest ready rank
    std::deque<Job> jobs;
    std::uint64_t last_seqno = 0;
    bool held = false;
    bool destroyed = false;
  };

  void engine_loop();
  // Stamps the holds whose points a timeline just reached. Under m_.
  void stamp_holds_locked();
  Queue* runnable_locked();
  // Executes the copies (or the injected failure); returns 0 or a negative errno.
  int run(Job& job);
  std::shared_ptr<Bo> bo_locked(std::uint32_t handle, const char* role) const;
  void lock_pages(std::uintptr_t first, std::uintptr_t last);
  void unlock_pages(std::uintptr_t first, std::uintptr_t last) noexcept;

  const std::size_t index_;
  mutable std::mutex m_;
  std::condition_variable work_cv_;  // engine: new job, released hold, stop
  std::condition_variable done_cv_;  // waiters: a job ended
  std::map<std::uint32_t, std::shared_ptr<Bo>> bos_;
  std::map<std::uint32_t, Queue> queues_;
  std::map<std::uint32_t, std::shared_ptr<Timeline>> timelines_;
  std::map<std::uint32_t, Hold> holds_;              // numbered from next_handle_, like timelines
  std::map<std::uintptr_t, unsigned> locked_pages_;  // userptr page -> registrations on it
  std::uint32_t next_handle_ = 1;
  std::uint32_t next_queue_ = 1;
  std::uint64_t next_ticket_ = 1;
  std::uint64_t pinned_bytes_ = 0;
  int fail_next_ = 0;
  bool stop_ = false;
  bool running_ = false;  // the engine is executing a job outside the lock
  std::vector<bool> slot_used_;
  Completion* page_ = nullptr;                           // kMaxQueues slots, written by the engine only
  unsigned char device_buffer_[kDeviceBufferSize] = {};  // touched by the engine thread only
  std::thread engine_;
  // Relay threads (import_point) are detached: a device that is never closed (the C API's
  // live until exit) must not leave finished threads unjoined. The destructor waits for them.
  std::mutex relays_m_;  // never taken under m_
  std::condition_variable relays_cv_;
  unsigned relays_active_ = 0;  // under relays_m_
};

// The emulated backend behind a Device, or nullptr for a Drm device (for tests).
EmulatedBackend* emulated_backend(const hostrt::Device& device) noexcept;

}  // namespace hostrt::detail
