// How the pool sees a runtime stream: its internals (StreamCore), not the Stream handle, so a
// handle may be moved, or destroyed once nothing it allocated is still held.
#pragma once

#include "detail/device_core.hpp"
#include "detail/pool/stream_ref.hpp"

namespace hostrt::detail::pool {

extern const StreamOps kSharedStreamOps;
extern const StreamOps kOwnedStreamOps;

// Frees waiting on the stream keep its internals alive (retain). Inline: every stream-ordered
// allocate and free makes one.
inline StreamRef stream_ref(StreamCore& c) noexcept { return StreamRef{&c, &kSharedStreamOps}; }
// For a pool the stream owns itself (its staging): holds no reference to it, which would be a
// cycle.
inline StreamRef owned_stream_ref(StreamCore& c) noexcept { return StreamRef{&c, &kOwnedStreamOps}; }

}  // namespace hostrt::detail::pool
