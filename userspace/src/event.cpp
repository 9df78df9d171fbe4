#include "hostrt/event.hpp"

#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "hostrt/stream.hpp"

namespace hostrt {

void Event::record(Stream& stream) {
  EXPECTS(stream, "Event::record on a destroyed or empty stream");
  std::vector<Dependency> deps = stream.core()->pending_waits();
  core_ = stream.core();
  point_ = core_->last_submitted();
  deps_ = std::move(deps);
}

// A fault on a dependency's stream is that stream's to report (its own synchronize), so only
// the recorded stream's faults surface here.
bool Event::query() const {
  if (!core_) return true;
  for (const auto& [s, p] : deps_)
    if (!s->reached(p)) return false;
  if (!core_->reached(point_)) return false;
  core_->check_failure(point_);
  return true;
}

void Event::synchronize() {
  if (!core_) return;
  for (const auto& [s, p] : deps_) s->wait_until(p);
  core_->wait(point_);
}

std::uint64_t Event::stream_id() const noexcept { return core_ ? core_->id() : 0; }

}  // namespace hostrt
