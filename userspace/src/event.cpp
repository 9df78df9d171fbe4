#include "hostrt/event.hpp"

#include <string>

#include "detail/device_core.hpp"
#include "detail/expects.hpp"
#include "detail/fork_guard.hpp"
#include "detail/trace.hpp"
#include "hostrt/stream.hpp"

namespace hostrt {

namespace {

// The recorded stream's completion page is not mapped in a fork child: check first.
const Event::Recorded* usable(const std::shared_ptr<const Event::Recorded>& r, const char* what) {
  if (r && r->core->forked())
    detail::throw_used_after_fork(std::string(what) + ": event of stream " + std::to_string(r->core->id()));
  return r.get();
}

}  // namespace

Event& Event::operator=(const Event& o) {
  if (this == &o) return *this;
  std::shared_ptr<const Recorded> r = o.snapshot();
  std::lock_guard lk(m_);
  rec_.swap(r);  // the old recording goes after the lock
  return *this;
}

void Event::record(Stream& stream) {
  EXPECTS(stream, "Event::record on a destroyed or empty stream");
  if (stream.core()->forked())
    detail::throw_used_after_fork("Event::record: stream " + std::to_string(stream.id()));
  auto r = std::make_shared<Recorded>();
  r->deps = stream.core()->pending_waits();
  r->core = stream.core();
  r->point = r->core->last_submitted();
  detail::trace::emit(detail::trace::Kind::ApiBegin,
                      static_cast<std::uint64_t>(detail::trace::Api::EventRecord), stream.id(), 0, r->point);
  detail::trace::emit(detail::trace::Kind::ApiEnd,
                      static_cast<std::uint64_t>(detail::trace::Api::EventRecord));
  std::shared_ptr<const Recorded> made = std::move(r);
  std::lock_guard lk(m_);
  rec_.swap(made);
}

// A fault on a dependency's stream is that stream's to report (its own synchronize), so only
// the recorded stream's faults surface here.
bool Event::query() const {
  const auto r = snapshot();
  if (!usable(r, "Event::query")) return true;
  for (const auto& [s, p] : r->deps)
    if (!s->reached(p)) return false;
  if (!r->core->reached(r->point)) return false;
  r->core->check_failure(r->point);
  return true;
}

void Event::synchronize() {
  const auto r = snapshot();
  if (!usable(r, "Event::synchronize")) return;
  const detail::trace::ApiSpan span(detail::trace::Api::EventSynchronize, r->core->id(), 0, r->point);
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
