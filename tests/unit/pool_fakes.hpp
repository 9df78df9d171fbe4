// Deterministic stand-ins for the pool's two collaborators: a stream whose completion the test
// drives by hand, and a segment source of plain page-aligned memory that counts what it hands
// out and can be told to refuse.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "detail/pool/pool_core.hpp"
#include "detail/pool/segment_source.hpp"
#include "detail/pool/stream_ref.hpp"
#include "hostrt/error.hpp"

namespace hostrt::test {

// Ids must be unique among the fakes alive at once (the pool tells streams apart by id).
// A line of its own: threads driving streams of their own must not share one.
class alignas(64) FakeStream : public detail::pool::StreamIdentity {
 public:
  explicit FakeStream(std::uint64_t id) : StreamIdentity(id) {
    // Published as a runtime stream's are, so the pool's warm free sees the fakes the same way.
    state.store(0, std::memory_order_relaxed);
    StreamIdentity::completed = &completed_;
    page_generation = detail::current_fork_generation();
    std::lock_guard lk(directory_mu());
    directory()[id] = this;
  }
  // A test destroys a fake only once its work is complete (as the runtime keeps a destroyed
  // stream's unfinished work watchable): the pool then finds nothing to wait for.
  ~FakeStream() {
    std::lock_guard lk(directory_mu());
    const auto it = directory().find(stream_id);
    if (it != directory().end() && it->second == this) directory().erase(it);
  }
  FakeStream(const FakeStream&) = delete;
  FakeStream& operator=(const FakeStream&) = delete;
  std::uint64_t id() const { return stream_id; }

  // A job that will end when complete_to() (or a wait) reaches its point. It carries the
  // waits queued by wait_for(), as a runtime stream's next job carries Stream::wait's.
  std::uint64_t submit() {
    std::lock_guard lk(m_);
    queued_.clear();
    has_queued_.store(false, std::memory_order_release);
    const std::uint64_t p = submitted_.fetch_add(1, std::memory_order_acq_rel) + 1;
    state.store(p, std::memory_order_release);
    return p;
  }
  // Stream::wait(event recorded at `point` on `other`): the next job waits for it.
  void wait_for(FakeStream& other, std::uint64_t point) {
    std::lock_guard lk(m_);
    queued_.push_back({&other, point});
    has_queued_.store(true, std::memory_order_release);
    state.fetch_or(kWaitsQueued, std::memory_order_release);
  }
  void complete_to(std::uint64_t p) {
    std::atomic_ref<unsigned long long> done(completed_);
    unsigned long long cur = done.load(std::memory_order_acquire);
    while (cur < p && !done.compare_exchange_weak(cur, p, std::memory_order_acq_rel)) {
    }
  }
  void complete_all() { complete_to(submitted()); }
  std::uint64_t submitted() const { return submitted_.load(std::memory_order_acquire); }
  std::uint64_t completed() const { return __atomic_load_n(&completed_, __ATOMIC_ACQUIRE); }
  std::uint64_t waits() const { return waits_.load(); }
  // The job waited for next has failed: the pool's waits leave it, and user_wait reports it.
  void fail_next_wait() { fail_next_ = true; }
  // The user's own wait (Stream::wait_point): reports a failure the pool's waits left.
  void user_wait(std::uint64_t p) {
    complete_to(p);
    if (fail_next_.exchange(false)) throw DeviceFault(EIO, "fake stream: job failed", p);
  }
  // The next wait fails without the job ending (DeviceLost: the wait itself could not happen).
  void lose_next_wait() { lose_next_ = true; }

  detail::pool::StreamRef ref() { return {this, &kOps}; }

 private:
  static const detail::pool::StreamOps kOps;
  static std::mutex& directory_mu() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<std::uint64_t, FakeStream*>& directory() {
    static std::unordered_map<std::uint64_t, FakeStream*> d;
    return d;
  }

  std::atomic<std::uint64_t> submitted_{0};
  alignas(8) unsigned long long completed_ = 0;  // published (StreamIdentity::completed)
  std::atomic<std::uint64_t> waits_{0};
  std::atomic<bool> fail_next_{false};
  std::atomic<bool> lose_next_{false};
  std::mutex m_;
  std::vector<std::pair<FakeStream*, std::uint64_t>> queued_;
  std::atomic<bool> has_queued_{false};
};

inline const detail::pool::StreamOps FakeStream::kOps = {
    [](const detail::pool::StreamIdentity* s) noexcept {
      const auto* f = static_cast<const FakeStream*>(s);
      if (f->has_queued_.load(std::memory_order_acquire)) return ~std::uint64_t{0};
      const std::uint64_t last = f->submitted();
      return f->completed() >= last ? std::uint64_t{0} : last;
    },
    [](detail::pool::StreamIdentity* s, detail::pool::WaitList& waits, detail::pool::KeepList&) {
      auto* f = static_cast<FakeStream*>(s);
      {
        std::lock_guard lk(f->m_);
        for (auto [other, point] : f->queued_)
          if (other->completed() < point) waits.push_back({other->ref(), point});
      }
      const std::uint64_t last = f->submitted();
      if (f->completed() < last) waits.push_back({f->ref(), last});
    },
    [](const detail::pool::StreamIdentity* s, std::uint64_t p) noexcept {
      return static_cast<const FakeStream*>(s)->completed() >= p;
    },
    [](detail::pool::StreamIdentity* s, std::uint64_t p) {
      auto* f = static_cast<FakeStream*>(s);
      ++f->waits_;
      if (f->lose_next_.exchange(false)) throw DeviceLost(ENODEV, "fake stream: wait failed");
      f->complete_to(p);  // a pending failure stays for the user to see
    },
    // Tests keep their fake streams alive themselves.
    [](const detail::pool::StreamIdentity*) { return std::shared_ptr<const void>(); },
    [](std::uint64_t id, std::shared_ptr<const void>&) -> detail::pool::StreamRef {
      std::lock_guard lk(directory_mu());
      const auto it = directory().find(id);
      return it == directory().end() ? detail::pool::StreamRef{} : it->second->ref();
    },
};

struct SourceCounters {
  std::mutex mu;
  std::size_t live_bytes = 0;
  std::size_t live_segments = 0;
  std::size_t allocations = 0;
  std::size_t refuse_above = static_cast<std::size_t>(-1);  // live bytes the "driver" allows
  std::size_t last_request = 0;
  std::size_t round_to = 1;  // a "driver" that hands out more than asked (BO granularity)
  std::size_t peak_live_bytes = 0;
  std::atomic<unsigned> delay_us{0};  // a slow "driver": each allocation sleeps this long first
};

class FakeSource final : public detail::pool::SegmentSource {
 public:
  explicit FakeSource(std::shared_ptr<SourceCounters> c) : c_(std::move(c)) {}

  std::unique_ptr<detail::pool::SegmentMemory> allocate(std::size_t bytes) override {
    if (const unsigned d = c_->delay_us.load()) std::this_thread::sleep_for(std::chrono::microseconds(d));
    {
      std::lock_guard lk(c_->mu);
      c_->last_request = bytes;
      bytes = (bytes + c_->round_to - 1) / c_->round_to * c_->round_to;
      if (c_->live_bytes + bytes > c_->refuse_above)
        throw OutOfMemory(ENOMEM, "fake source: refused " + std::to_string(bytes));
      c_->live_bytes += bytes;
      c_->peak_live_bytes = std::max(c_->peak_live_bytes, c_->live_bytes);
      ++c_->live_segments;
      ++c_->allocations;
    }
    return std::make_unique<Memory>(bytes, c_);
  }

 private:
  class Memory final : public detail::pool::SegmentMemory {
   public:
    Memory(std::size_t n, std::shared_ptr<SourceCounters> c)
        : p_(std::aligned_alloc(4096, n)), n_(n), c_(std::move(c)) {}
    ~Memory() override {
      std::free(p_);
      std::lock_guard lk(c_->mu);
      c_->live_bytes -= n_;
      --c_->live_segments;
    }
    void* data() const noexcept override { return p_; }
    std::size_t size() const noexcept override { return n_; }

   private:
    void* p_;
    std::size_t n_;
    std::shared_ptr<SourceCounters> c_;
  };

  std::shared_ptr<SourceCounters> c_;
};

inline std::shared_ptr<detail::pool::PoolCore> make_fake_pool(const std::shared_ptr<SourceCounters>& c,
                                                              const PoolOptions& o = {}) {
  return detail::pool::PoolCore::create(std::make_unique<FakeSource>(c), o);
}

// The seed for randomized tests: HOSTRT_POOL_SEED when set, otherwise a fresh one.
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("HOSTRT_POOL_SEED")) return std::strtoull(s, nullptr, 0);
  return std::random_device{}() * 0x100000001ull + std::random_device{}();
}

}  // namespace hostrt::test
