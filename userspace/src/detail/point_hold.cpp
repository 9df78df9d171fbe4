#include "detail/point_hold.hpp"

#include "detail/device_core.hpp"

namespace hostrt::detail {

PointHold::PointHold(const StreamCore& stream, std::uint64_t point)
    : dev_(stream.device()), handle_(dev_->backend("Event::record").hold_point(stream.timeline(), point)) {}

PointHold::~PointHold() {
  if (DeviceBackend* be = dev_->backend_for_release()) be->release_point_hold(handle_);
}

std::int64_t PointHold::signal_time_ns() const {
  return dev_->backend("Event::elapsed").held_point_time_ns(handle_);
}

}  // namespace hostrt::detail
