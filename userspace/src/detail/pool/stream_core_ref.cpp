#include "detail/pool/stream_core_ref.hpp"

#include "detail/device_core.hpp"
#include "detail/pool/stream_directory.hpp"

namespace hostrt::detail::pool {

namespace {

std::uint64_t unfinished(const StreamIdentity* s) noexcept {
  // Inline: one load of the stream's state word (last point and the queued-waits flag) and a
  // completion-page read; this runs on every free.
  const auto* c = static_cast<const StreamCore*>(s);
  const std::uint64_t w = c->state_word();
  // A fork child must not read the completion page (not inherited): the slow path, whose
  // first check refuses the parent's pool with UsedAfterFork.
  if ((w & StreamCore::kWaitsQueued) || c->forked()) [[unlikely]]
    return w | StreamCore::kWaitsQueued;
  return c->reached(w) ? std::uint64_t{0} : w;
}

template <const StreamOps* Self>
void collect(StreamIdentity* s, WaitList& waits, KeepList& keeps) {
  auto* c = static_cast<StreamCore*>(s);
  // The queued waits first: reading them may drop reached ones and clear the flag.
  for (auto& [other, point] : c->pending_waits()) {
    waits.push_back({stream_ref(*other), point});
    keeps.push_back(std::move(other));
  }
  const std::uint64_t last = c->last_submitted();
  if (!c->reached(last)) waits.push_back({StreamRef{c, Self}, last});
}

bool reached(const StreamIdentity* s, std::uint64_t point) noexcept {
  return static_cast<const StreamCore*>(s)->reached(point);
}

// The timeline wait alone: StreamCore::wait would also report (and so consume) a device fault
// that belongs to the user's next synchronize.
void wait_quiet(StreamIdentity* s, std::uint64_t point) {
  auto* c = static_cast<StreamCore*>(s);
  if (!c->reached(point)) c->device()->backend("pool wait").wait_timeline(c->timeline(), point);
}

std::shared_ptr<const void> retain(const StreamIdentity* s) {
  return static_cast<const StreamCore*>(s)->shared_from_this();
}
std::shared_ptr<const void> retain_nothing(const StreamIdentity*) { return {}; }

StreamRef find(std::uint64_t id, std::shared_ptr<const void>& keep) {
  return stream_directory().find(id, keep);
}
// The stream owns the pool asking: alive while it asks, and never held by it (a cycle).
StreamRef find_owned(std::uint64_t id, std::shared_ptr<const void>& keep) {
  StreamRef r = stream_directory().find(id, keep);
  keep.reset();
  if (r) r.ops = &kOwnedStreamOps;
  return r;
}

}  // namespace
constinit const StreamOps kSharedStreamOps = {
    unfinished, collect<&kSharedStreamOps>, reached, wait_quiet, retain, find};
constinit const StreamOps kOwnedStreamOps = {
    unfinished, collect<&kOwnedStreamOps>, reached, wait_quiet, retain_nothing, find_owned};

}  // namespace hostrt::detail::pool
