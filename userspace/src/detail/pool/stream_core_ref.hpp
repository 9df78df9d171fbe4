// How the pool sees a runtime stream: its internals (StreamCore), not the Stream handle, so a
// handle may be moved, or destroyed once nothing it allocated is still held.
#pragma once

#include "detail/pool/stream_ref.hpp"

namespace hostrt::detail {
class StreamCore;
}

namespace hostrt::detail::pool {

// Frees waiting on the stream keep its internals alive (retain).
StreamRef stream_ref(StreamCore& c) noexcept;
// For a pool the stream owns itself (its staging): holds no reference to it, which would be a
// cycle.
StreamRef owned_stream_ref(StreamCore& c) noexcept;

}  // namespace hostrt::detail::pool
