// What Event::record captured: one recording, never changed once made (record() replaces the
// whole of it), so readers take it whole without the Event's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace hostrt::detail {

class StreamCore;
class PointHold;

struct EventRecording {
  std::shared_ptr<StreamCore> core;
  std::uint64_t point = 0;
  // Points on other streams the recorded stream waited for.
  std::vector<std::pair<std::shared_ptr<StreamCore>, std::uint64_t>> deps;
  bool timed = false;
  std::int64_t recorded_ns = 0;  // when record() ran (CLOCK_MONOTONIC)
  // The points not yet reached at record() (the stream's and its waits'), held for their
  // signal times.
  std::vector<std::shared_ptr<const PointHold>> holds;
};

}  // namespace hostrt::detail
