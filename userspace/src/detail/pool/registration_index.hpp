// RegistrationIndex: an interval index of registered (pinned in place) host ranges with
// reference counts, so that registering a range inside one already registered costs no
// ioctl. Ranges never overlap (the runtime refuses double registration). Released ranges
// stay registered, idle, until evicted or until a new registration overlaps them.
// The registrar (a driver call) is never invoked with the index's lock held, but for the
// staleness checks that follow an invalidation.
//
// A registration pins the pages its range had when it was made. When the driver reports an
// invalidation (munmap + mmap at the same address, MADV_DONTNEED...), the next acquire sees
// the registrar's counter move (one load), asks which registrations went stale, and drops
// the idle ones, so the range is registered again with its new pages.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace hostrt::detail::pool {

// One registration; the destructor unregisters (never throws).
class Registration {
 public:
  virtual ~Registration() = default;
  virtual std::uint32_t handle() const noexcept = 0;
};

class Registrar {
 public:
  virtual ~Registrar() = default;
  // Throws hostrt::Error subclasses (AlreadyRegistered, OutOfMemory...).
  virtual std::unique_ptr<Registration> register_range(void* ptr, std::size_t bytes) = 0;
  // A word that grows with each invalidation, or nullptr (registrations never go stale).
  virtual const std::uint64_t* invalidations() { return nullptr; }
  virtual bool stale(const Registration& /*reg*/) { return false; }
};

class RegistrationIndex {
 public:
  struct Lease {
    std::uintptr_t key;  // start of the covering registration
    std::uint32_t handle;
  };

  explicit RegistrationIndex(std::unique_ptr<Registrar> registrar);
  RegistrationIndex(const RegistrationIndex&) = delete;
  RegistrationIndex& operator=(const RegistrationIndex&) = delete;
  ~RegistrationIndex();

  Lease acquire(void* ptr, std::size_t bytes);
  void release(std::uintptr_t key) noexcept;
  std::size_t evict_idle();
  std::size_t registrations() const;
  std::uint64_t hits() const;
  std::uint64_t misses() const;
  // References held on the registration starting at key (0 if none): for tests.
  std::size_t references(std::uintptr_t key) const;

 private:
  struct Entry {
    std::uintptr_t end = 0;
    std::size_t refs = 0;
    bool stale = false;  // invalidated while in use: dropped at its last release
    std::unique_ptr<Registration> reg;
  };
  using Map = std::map<std::uintptr_t, Entry>;

  // The entry containing [a, e), or end().
  Map::iterator containing(std::uintptr_t a, std::uintptr_t e);
  // The counter moved: drop stale idle registrations, mark stale ones in use.
  void revalidate(std::uint64_t now);

  std::unique_ptr<Registrar> registrar_;
  const std::uint64_t* counter_ = nullptr;
  std::atomic<std::uint64_t> seen_{0};
  mutable std::mutex mu_;
  Map ranges_;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
};

}  // namespace hostrt::detail::pool
