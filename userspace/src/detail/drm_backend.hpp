// The real device: an edu_accel render node driven through libdrm, exactly per
// include/uapi/drm/edu_accel.h.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "detail/backend.hpp"

namespace hostrt::detail {

class DrmBackend final : public DeviceBackend {
 public:
  DrmBackend(int fd, std::string node, std::string version);
  ~DrmBackend() override;  // unmaps the completion page and closes the file

  std::string name() const override;
  std::string node() const override { return node_; }
  std::uint64_t get_param(std::uint32_t param) override;
  BoMapping create_bo(std::size_t bytes) override;
  BoMapping register_user(void* ptr, std::size_t bytes, std::uint32_t uapi_flags) override;
  void release_bo(const BoMapping& bo) noexcept override;
  int export_dmabuf(std::uint32_t handle) override;
  BoMapping import_dmabuf(int fd) override;
  BoMapping share_from(DeviceBackend& owner, std::uint32_t owner_handle) override;
  SyncPoint import_point(DeviceBackend& other, std::uint32_t timeline, std::uint64_t point,
                         std::shared_ptr<const void> keep) override;
  QueueInfo create_queue(std::uint32_t priority) override;
  void destroy_queue(std::uint32_t queue) noexcept override;
  std::uint32_t create_timeline() override;
  void destroy_timeline(std::uint32_t handle) noexcept override;
  void wait_timeline(std::uint32_t handle, std::uint64_t point) override;
  // A binary syncobj given the point's fence (SYNCOBJ_TRANSFER): the fence keeps its
  // timestamp, read back through a sync_file (SYNC_IOC_FILE_INFO).
  std::uint32_t hold_point(std::uint32_t timeline, std::uint64_t point) override;
  std::int64_t held_point_time_ns(std::uint32_t hold) override;
  void release_point_hold(std::uint32_t hold) noexcept override;
  std::uint64_t submit(std::uint32_t queue, std::span<const CopyOp> ops, std::span<const SyncPoint> in_syncs,
                       std::span<const SyncPoint> out_syncs) override;

  int fd() const noexcept { return fd_; }
  std::uint64_t client_id() override;

 private:
  // Maps the file's completion page on first use (every queue shares it).
  const unsigned char* completion_page();
  const std::uint64_t* invalidation_counter() override;
  bool registration_stale(std::uint32_t handle) override;

  // Users of each GEM handle of this file: importing a dma-buf of a BO the file already has
  // returns that BO's handle, which GEM_CLOSE may close only with its last user.
  void add_handle_user(std::uint32_t handle);
  bool last_handle_user(std::uint32_t handle) noexcept;

  int fd_;
  std::string node_;
  std::mutex handles_m_;
  std::map<std::uint32_t, unsigned> handle_users_;
  std::string version_;
  std::mutex page_m_;
  const unsigned char* page_ = nullptr;
};

// Render nodes bound to edu_accel, sorted by path.
std::vector<std::string> edu_accel_render_nodes();

}  // namespace hostrt::detail
