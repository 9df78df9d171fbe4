// Limits of the driver that a CUDA program never meets: the driver keeps at most
// max_jobs_per_file (256) jobs of one open file in flight and refuses more with EBUSY. A stream
// waits for one to end instead of failing the copy (before: SystemError EBUSY, hrtErrorUnknown
// in C, at the 257th copy queued behind a slow one). Both backends: the emulated one keeps the
// same bound.
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class StreamLimits : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    if (GetParam() == Backend::Drm && std::getenv("VM_ICOUNT") &&
        std::string(std::getenv("VM_ICOUNT")) == "off")
      GTEST_SKIP() << "300 transfers of 100 ms real time each without icount";
    dev_.emplace(Device::open(0, GetParam()));
  }
  Device& dev() { return *dev_; }
  std::optional<Device> dev_;
};

TEST_P(StreamLimits, MoreCopiesThanTheDriverKeepsInFlightWaitInsteadOfFailing) {
  detail::EmulatedBackend* emu = detail::emulated_backend(dev());
  Stream s = dev().create_stream();
  PinnedBuffer a = dev().host_alloc(16384), b = dev().host_alloc(16384);
  fill(a.data(), 64, 3);
  if (emu != nullptr) {
    emu->hold_queue(hostrt::detail::Access::core(s)->queue_id(), true);
  } else {
    s.memcpy_async(b.data(), a.data(), 16384, CopyKind::H2H);  // ~1 s on edu: the rest queue behind it
  }
  constexpr int kCopies = 300;
  std::atomic<int> submitted{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::thread producer([&] {
    try {
      for (int i = 0; i < kCopies; ++i) {
        s.memcpy_async(DevicePtr(0), a.data(), 64);
        ++submitted;
      }
    } catch (const std::exception& e) {
      error = e.what();
      failed = true;
    }
  });
  if (emu != nullptr) {
    // Held: the producer gets to the bound and waits there; then the engine may run.
    while (submitted.load() < static_cast<int>(detail::EmulatedBackend::kMaxJobsPerFile) - 1 &&
           !failed.load())
      std::this_thread::yield();
    emu->wait_until_stalled();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    emu->hold_queue(hostrt::detail::Access::core(s)->queue_id(), false);
  }
  producer.join();
  EXPECT_FALSE(failed.load()) << "copy " << submitted.load() + 1 << " failed: " << error;
  EXPECT_EQ(submitted.load(), kCopies);
  EXPECT_NO_THROW(s.synchronize());
}

INSTANTIATE_TEST_SUITE_P(Backends, StreamLimits, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
