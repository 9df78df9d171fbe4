#include "hostrt/event.hpp"

#include <algorithm>
#include <string>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/event_recording.hpp"
#include "detail/expects.hpp"
#include "detail/fork_guard.hpp"
#include "detail/point_hold.hpp"
#include "detail/trace.hpp"
#include "hostrt/stream.hpp"

namespace hostrt {

namespace {

// The recorded stream's completion page is not mapped in a fork child: check first.
const detail::EventRecording* usable(const std::shared_ptr<const detail::EventRecording>& r,
                                     const char* what) {
  if (r && r->core->forked())
    detail::throw_used_after_fork(std::string(what) + ": event of stream " + std::to_string(r->core->id()));
  return r.get();
}

// Whether the recorded work has ended; throws DeviceFault for a failure of the recorded
// stream. A fault on a dependency's stream is that stream's to report (its own synchronize).
bool completed(const detail::EventRecording& r) {
  for (const auto& [s, p] : r.deps)
    if (!s->reached(p)) return false;
  if (!r.core->reached(r.point)) return false;
  r.core->check_failure(r.point);
  return true;
}

// When the stream reached the recording (it has): the latest of record()'s own time and the
// ends of the jobs it waited for.
std::int64_t reached_at_ns(const detail::EventRecording& r) {
  std::int64_t t = r.recorded_ns;
  for (const auto& h : r.holds) t = std::max(t, h->signal_time_ns());
  return t;
}

}  // namespace

Event::Event(EventFlags flags) : flags_(flags) {
  constexpr unsigned known =
      static_cast<unsigned>(EventFlags::BlockingSync) | static_cast<unsigned>(EventFlags::DisableTiming);
  EXPECTS((static_cast<unsigned>(flags) & ~known) == 0,
          "Event: unknown flags " + std::to_string(static_cast<unsigned>(flags)));
}

Event::Event(const Event& o) : flags_(o.flags_), rec_(o.snapshot()) {}

std::shared_ptr<const detail::EventRecording> Event::snapshot() const {
  std::lock_guard lk(m_);
  return rec_;
}

bool Event::recorded() const { return snapshot() != nullptr; }

Event& Event::operator=(const Event& o) {
  if (this == &o) return *this;
  std::shared_ptr<const detail::EventRecording> r = o.snapshot();
  flags_ = o.flags_;
  std::lock_guard lk(m_);
  rec_.swap(r);  // the old recording goes after the lock
  return *this;
}

void Event::record(Stream& stream) {
  EXPECTS(stream, "Event::record on a destroyed or empty stream");
  if (hostrt::detail::Access::core(stream)->forked())
    detail::throw_used_after_fork("Event::record: stream " + std::to_string(stream.id()));
  hostrt::detail::Access::core(stream)->drain_host_funcs();  // the event follows them
  auto r = std::make_shared<detail::EventRecording>();
  r->deps = hostrt::detail::Access::core(stream)->pending_waits();
  r->core = hostrt::detail::Access::core(stream);
  r->point = r->core->last_submitted();
  if (timing()) {
    r->timed = true;
    // Points seen reached here ended before the clock is read below, so record()'s time
    // stands for them; the others are held for the time they end.
    if (!r->core->reached(r->point))
      r->holds.push_back(std::make_shared<const detail::PointHold>(*r->core, r->point));
    for (const auto& [s, p] : r->deps)
      if (!s->reached(p)) r->holds.push_back(std::make_shared<const detail::PointHold>(*s, p));
    r->recorded_ns = detail::monotonic_ns();
  }
  detail::trace::emit(detail::trace::Kind::ApiBegin,
                      static_cast<std::uint64_t>(detail::trace::Api::EventRecord), stream.id(), 0, r->point);
  detail::trace::emit(detail::trace::Kind::ApiEnd,
                      static_cast<std::uint64_t>(detail::trace::Api::EventRecord));
  std::shared_ptr<const detail::EventRecording> made = std::move(r);
  std::lock_guard lk(m_);
  rec_.swap(made);
}

bool Event::query() const {
  const auto r = snapshot();
  if (!usable(r, "Event::query")) return true;
  return completed(*r);
}

std::optional<std::chrono::nanoseconds> Event::elapsed(const Event& start, const Event& end) {
  const auto a = start.snapshot();
  const auto b = end.snapshot();
  EXPECTS(a && b, std::string("Event::elapsed: the ") + (a ? "end" : "start") + " event was never recorded");
  EXPECTS(a->timed && b->timed, std::string("Event::elapsed: the ") + (a->timed ? "end" : "start") +
                                    " event was recorded without timing (EventFlags::DisableTiming)");
  usable(a, "Event::elapsed");
  usable(b, "Event::elapsed");
  if (!completed(*a) || !completed(*b)) return std::nullopt;
  return std::chrono::nanoseconds(reached_at_ns(*b) - reached_at_ns(*a));
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
