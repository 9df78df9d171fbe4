#include "detail/pool/stream_directory.hpp"

#include <thread>

namespace hostrt::detail::pool {

void StreamDirectory::publish(StreamRef ref, const std::shared_ptr<const void>& life) {
  std::lock_guard lk(mu_);
  entries_.insert_or_assign(ref.key(), Entry{ref, life});
}

void StreamDirectory::replace(StreamRef ref, const std::shared_ptr<const void>& life) noexcept {
  std::lock_guard lk(mu_);
  const auto it = entries_.find(ref.key());
  if (it != entries_.end()) it->second = Entry{ref, life};
}

StreamRef StreamDirectory::find(std::uint64_t id, std::shared_ptr<const void>& keep) const {
  for (;;) {
    {
      std::lock_guard lk(mu_);
      const auto it = entries_.find(id);
      if (it == entries_.end()) return {};
      keep = it->second.life.lock();
      if (keep) return it->second.ref;
    }
    // Being destroyed: its destructor is about to retire or withdraw it.
    std::this_thread::yield();
  }
}

void StreamDirectory::withdraw(std::uint64_t id, const StreamIdentity* stream) noexcept {
  std::lock_guard lk(mu_);
  const auto it = entries_.find(id);
  if (it != entries_.end() && it->second.ref.stream == stream) entries_.erase(it);
}

StreamDirectory& stream_directory() noexcept {
  // Never destroyed: a static Stream may be destroyed after any static of this file.
  static auto* const d = new StreamDirectory;
  return *d;
}

}  // namespace hostrt::detail::pool
