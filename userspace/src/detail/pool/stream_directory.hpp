// StreamDirectory: the process's streams by id, for a pool block whose home stream may have
// been destroyed since it was allocated (see StreamOps::find). A destroyed stream with work
// still to come stays listed, as its RetiredStream, until that work is reached.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "detail/pool/stream_ref.hpp"

namespace hostrt::detail::pool {

class StreamDirectory {
 public:
  // Lists `ref` under its id; `life` owns it. Throws std::bad_alloc.
  void publish(StreamRef ref, const std::shared_ptr<const void>& life);
  // Puts `ref` in place of what is listed under its id, if anything is (allocates nothing).
  void replace(StreamRef ref, const std::shared_ptr<const void>& life) noexcept;
  // The stream listed under `id` with a reference holding it, or empty when none is. A
  // stream whose last reference just went waits here until its destructor has replaced or
  // removed it: until then nobody can tell whether its work is done.
  StreamRef find(std::uint64_t id, std::shared_ptr<const void>& keep) const;
  // Removes `id` if `stream` is what is listed there (a destructor's last word).
  void withdraw(std::uint64_t id, const StreamIdentity* stream) noexcept;

 private:
  struct Entry {
    StreamRef ref;
    std::weak_ptr<const void> life;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, Entry> entries_;
};

// The one directory of the runtime's streams.
StreamDirectory& stream_directory() noexcept;

}  // namespace hostrt::detail::pool
