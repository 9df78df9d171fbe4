#include "hostrt/event.hpp"

#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "hostrt/stream.hpp"

namespace hostrt {

Event& Event::operator=(const Event& o) {
  if (this == &o) return *this;
  std::shared_ptr<const Recorded> r = o.snapshot();
  std::lock_guard lk(m_);
  rec_.swap(r);  // the old recording goes after the lock
  return *this;
}

void Event::record(Stream& stream) {
  EXPECTS(stream, "Event::record on a destroyed or empty stream");
  auto r = std::make_shared<Recorded>();
  r->deps = stream.core()->pending_waits();
  r->core = stream.core();
  r->point = r->core->last_submitted();
  std::shared_ptr<const Recorded> made = std::move(r);
  std::lock_guard lk(m_);
  rec_.swap(made);
}

// A fault on a dependency's stream is that stream's to report (its own synchronize), so only
// the recorded stream's faults surface here.
bool Event::query() const {
  const auto r = snapshot();
  if (!r) return true;
  for (const auto& [s, p] : r->deps)
    if (!s->reached(p)) return false;
  if (!r->core->reached(r->point)) return false;
  r->core->check_failure(r->point);
  return true;
}

void Event::synchronize() {
  const auto r = snapshot();
  if (!r) return;
  for (const auto& [s, p] : r->deps) s->wait_until(p);
  r->core->wait(r->point);
}

std::uint64_t Event::point() const {
  const auto r = snapshot();
  return r ? r->point : 0;
}

std::uint64_t Event::stream_id() const {
  const auto r = snapshot();
  return r ? r->core->id() : 0;
}

}  // namespace hostrt
