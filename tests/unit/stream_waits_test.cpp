// Stream::wait on many events: a job may carry at most MAX_SYNCS in-syncs (16), yet CUDA lets a
// stream wait on any number of events. Before, every wait became one in-sync and the next copy
// on the stream failed with InvalidArgument, and so did every later one. Both backends; the
// producers are held (Emulated) or behind a slow job (Drm, ~100 ms per edu transfer) so that
// their events are still unreached when the consumer submits.
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "detail/access.hpp"
#include "detail/device_core.hpp"
#include "detail/emulated_backend.hpp"
#include "test_util.hpp"

namespace hostrt::test {
namespace {

class StreamWaits : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_DEVICE(GetParam());
    dev_.emplace(Device::open(0, GetParam()));
    src_ = dev().host_alloc(4096);
    dst_ = dev().host_alloc(4096);
  }
  Device& dev() { return *dev_; }
  detail::EmulatedBackend* emu() { return detail::emulated_backend(dev()); }

  // Work on s that stays unfinished for a while: held until release_all() on Emulated.
  void slow_work(Stream& s) {
    if (emu()) {
      emu()->hold_queue(hostrt::detail::Access::core(s)->queue_id(), true);
      held_.push_back(hostrt::detail::Access::core(s)->queue_id());
      s.memcpy_async(DevicePtr(0), src_.data(), 64);
    } else {
      s.memcpy_async(dst_.data(), src_.data(), 4096, CopyKind::H2H);
    }
  }
  // Releases the holds once the engine has stalled on them, from another thread (the
  // consumer's submit may host-wait for some of them).
  std::thread release_all_later() {
    return std::thread([this] {
      if (!emu()) return;
      emu()->wait_until_stalled();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (auto q : held_) emu()->hold_queue(q, false);
    });
  }
  // A copy on the consumer after its waits, checked byte for byte.
  void consume_and_check(Stream& consumer) {
    const std::size_t n = 1000;
    PinnedBuffer in = dev().host_alloc(n), out = dev().host_alloc(n);
    fill(in.data(), n, 9);
    consumer.memcpy_async(DevicePtr(2048), in.data(), n);
    consumer.memcpy_async(out.data(), DevicePtr(2048), n);
    consumer.synchronize();
    EXPECT_EQ(first_diff(out.data(), in.data(), n), -1);
  }

  std::optional<Device> dev_;
  PinnedBuffer src_, dst_;
  std::vector<std::uint32_t> held_;
};

TEST_P(StreamWaits, FortyEventsOfOneStreamAreOneWait) {
  Stream producer = dev().create_stream(), consumer = dev().create_stream();
  slow_work(producer);
  std::vector<Event> events(40);
  for (auto& e : events) {
    producer.memcpy_async(DevicePtr(0), src_.data(), 64);
    e.record(producer);
  }
  for (auto& e : events) consumer.wait(e);
  std::thread releaser = release_all_later();
  EXPECT_NO_THROW(consume_and_check(consumer));
  releaser.join();
  EXPECT_TRUE(events.back().query()) << "the consumer ran before the last event it waits for";
}

TEST_P(StreamWaits, EventsOfMoreStreamsThanOneJobMayNameAreAllWaitedFor) {
  const unsigned max = dev().capabilities().max_syncs;
  ASSERT_GE(max, 1u);
  ASSERT_LE(max + 8, dev().capabilities().max_queues - 1) << "too few queues for the test";
  std::vector<Stream> producers;
  std::vector<Event> events(max + 8);
  for (auto& e : events) {
    Stream& p = producers.emplace_back(dev().create_stream());
    slow_work(p);
    e.record(p);
  }
  Stream consumer = dev().create_stream();
  for (auto& e : events) consumer.wait(e);
  std::thread releaser = release_all_later();
  EXPECT_NO_THROW(consume_and_check(consumer));
  releaser.join();
  for (std::size_t i = 0; i < events.size(); ++i)
    EXPECT_TRUE(events[i].query()) << "the consumer ran before event " << i << " it waits for";
  // And the stream is not wedged: a plain copy after it works too.
  EXPECT_NO_THROW(consume_and_check(consumer));
}

INSTANTIATE_TEST_SUITE_P(Backends, StreamWaits, ::testing::Values(Backend::Emulated, Backend::Drm),
                         backend_name);

}  // namespace
}  // namespace hostrt::test
