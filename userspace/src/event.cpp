#include "hostrt/event.hpp"

#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "hostrt/stream.hpp"

namespace hostrt {

void Event::record(Stream& stream) {
  EXPECTS(stream, "Event::record on a destroyed or empty stream");
  core_ = stream.core();
  point_ = core_->last_submitted();
}

bool Event::query() const {
  if (!core_) return true;
  if (!core_->reached(point_)) return false;
  core_->check_failure(point_);
  return true;
}

void Event::synchronize() {
  if (core_) core_->wait(point_);
}

std::uint64_t Event::stream_id() const noexcept { return core_ ? core_->id() : 0; }

}  // namespace hostrt
