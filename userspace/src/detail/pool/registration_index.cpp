#include "detail/pool/registration_index.hpp"

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "detail/trace.hpp"
#include "hostrt/error.hpp"

namespace hostrt::detail::pool {

RegistrationIndex::RegistrationIndex(std::unique_ptr<Registrar> registrar)
    : registrar_(std::move(registrar)), counter_(registrar_->invalidations()) {
  if (counter_) seen_.store(__atomic_load_n(counter_, __ATOMIC_ACQUIRE), std::memory_order_relaxed);
}

void RegistrationIndex::revalidate(std::uint64_t now) {
  std::vector<std::unique_ptr<Registration>> dead;  // unregistered after the lock is dropped
  std::lock_guard lk(mu_);
  if (seen_.load(std::memory_order_relaxed) == now) return;
  for (auto it = ranges_.begin(); it != ranges_.end();) {
    if (!it->second.stale && registrar_->stale(*it->second.reg)) {
      if (it->second.refs == 0) {
        dead.push_back(std::move(it->second.reg));
        it = ranges_.erase(it);
        continue;
      }
      it->second.stale = true;
    }
    ++it;
  }
  seen_.store(now, std::memory_order_relaxed);
  trace::emit(trace::Kind::RegStale, dead.size());
}

RegistrationIndex::~RegistrationIndex() = default;

RegistrationIndex::Map::iterator RegistrationIndex::containing(std::uintptr_t a, std::uintptr_t e) {
  auto it = ranges_.upper_bound(a);
  if (it == ranges_.begin()) return ranges_.end();
  --it;
  return (it->first <= a && e <= it->second.end) ? it : ranges_.end();
}

RegistrationIndex::Lease RegistrationIndex::acquire(void* ptr, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  if (ptr == nullptr || bytes == 0 || a + bytes < a)
    throw InvalidArgument(EINVAL,
                          "registration cache: bad range " + std::to_string(a) + "+" + std::to_string(bytes));
  const std::uintptr_t e = a + bytes;
  // One load in the common case: has any registration of this device been invalidated?
  if (counter_) {
    const std::uint64_t now = __atomic_load_n(counter_, __ATOMIC_ACQUIRE);
    if (now != seen_.load(std::memory_order_relaxed)) revalidate(now);
  }
  std::vector<std::unique_ptr<Registration>> stale;  // unregistered after the lock is dropped
  {
    std::lock_guard lk(mu_);
    if (auto it = containing(a, e); it != ranges_.end()) {
      if (it->second.stale)
        throw AlreadyRegistered(
            EEXIST,
            "registration cache: the range was unmapped or remapped while a RegisteredRange "
            "still holds its old registration; release it first");
      ++it->second.refs;
      ++hits_;
      trace::emit(trace::Kind::RegHit, a, bytes, it->first);
      return {it->first, it->second.reg->handle()};
    }
    // Overlapping ranges: idle ones give way, one in use is a double registration.
    auto it = ranges_.lower_bound(a);
    if (it != ranges_.begin() && std::prev(it)->second.end > a) --it;
    for (auto j = it; j != ranges_.end() && j->first < e; ++j)
      if (j->second.refs > 0)
        throw AlreadyRegistered(EEXIST, "registration cache: range overlaps a registration in use");
    while (it != ranges_.end() && it->first < e) {
      stale.push_back(std::move(it->second.reg));
      it = ranges_.erase(it);
    }
  }
  stale.clear();
  std::unique_ptr<Registration> reg = registrar_->register_range(ptr, bytes);
  trace::emit(trace::Kind::RegMiss, a, bytes);
  std::lock_guard lk(mu_);
  ++misses_;
  if (auto it = containing(a, e); it != ranges_.end()) {
    // Another thread registered a covering range meanwhile; ours is dropped, after the lock
    // (reg is declared before lk, so it is destroyed after it).
    ++it->second.refs;
    return {it->first, it->second.reg->handle()};
  }
  auto [it, inserted] = ranges_.try_emplace(a);
  if (!inserted && it->second.refs > 0)
    throw AlreadyRegistered(EEXIST, "registration cache: range raced with another registration");
  it->second.end = e;
  it->second.refs = 1;
  std::swap(it->second.reg, reg);
  return {a, it->second.reg->handle()};
}

void RegistrationIndex::release(std::uintptr_t key) noexcept {
  std::unique_ptr<Registration> dead;  // unregistered after the lock is dropped
  std::lock_guard lk(mu_);
  auto it = ranges_.find(key);
  if (it == ranges_.end() || it->second.refs == 0) return;
  if (--it->second.refs == 0 && it->second.stale) {
    dead = std::move(it->second.reg);
    ranges_.erase(it);
  }
}

std::size_t RegistrationIndex::evict_idle() {
  std::vector<std::unique_ptr<Registration>> stale;
  {
    std::lock_guard lk(mu_);
    for (auto it = ranges_.begin(); it != ranges_.end();) {
      if (it->second.refs == 0) {
        stale.push_back(std::move(it->second.reg));
        it = ranges_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return stale.size();
}

std::size_t RegistrationIndex::registrations() const {
  std::lock_guard lk(mu_);
  return ranges_.size();
}

std::uint64_t RegistrationIndex::hits() const {
  std::lock_guard lk(mu_);
  return hits_;
}

std::uint64_t RegistrationIndex::misses() const {
  std::lock_guard lk(mu_);
  return misses_;
}

std::size_t RegistrationIndex::references(std::uintptr_t key) const {
  std::lock_guard lk(mu_);
  auto it = ranges_.find(key);
  return it == ranges_.end() ? 0 : it->second.refs;
}

}  // namespace hostrt::detail::pool
