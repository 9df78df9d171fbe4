// The registration cache's interval index, on a counting fake registrar.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

#include "detail/pool/registration_index.hpp"
#include "hostrt/error.hpp"

namespace hostrt::test {
namespace {

using detail::pool::Registrar;
using detail::pool::Registration;
using detail::pool::RegistrationIndex;

struct Calls {
  int registered = 0;
  int unregistered = 0;
};

class FakeRegistrar final : public Registrar {
 public:
  explicit FakeRegistrar(Calls& c) : c_(c) {}
  std::unique_ptr<Registration> register_range(void*, std::size_t) override {
    struct Reg final : Registration {
      Reg(Calls& c, std::uint32_t h) : c(c), h(h) {}
      ~Reg() override { ++c.unregistered; }
      std::uint32_t handle() const noexcept override { return h; }
      Calls& c;
      std::uint32_t h;
    };
    return std::make_unique<Reg>(c_, static_cast<std::uint32_t>(++c_.registered));
  }

 private:
  Calls& c_;
};

class RegistrationIndexTest : public ::testing::Test {
 protected:
  Calls calls;
  std::vector<unsigned char> mem = std::vector<unsigned char>(1 << 16);
  RegistrationIndex index{std::make_unique<FakeRegistrar>(calls)};
  void* at(std::size_t off) { return mem.data() + off; }
};

TEST_F(RegistrationIndexTest, RepeatedAndInnerRangesCostNoRegistration) {
  const auto a = index.acquire(at(0), 8192);
  const auto b = index.acquire(at(0), 8192);
  const auto c = index.acquire(at(100), 1000);
  EXPECT_EQ(calls.registered, 1);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.key, c.key);
  EXPECT_EQ(c.handle, 1u);
  EXPECT_EQ(index.references(a.key), 3u);
  EXPECT_EQ(index.hits(), 2u);
  EXPECT_EQ(index.misses(), 1u);
  index.release(a.key);
  index.release(b.key);
  index.release(c.key);
  EXPECT_EQ(index.references(a.key), 0u);
  EXPECT_EQ(calls.unregistered, 0) << "idle registrations stay cached";
  const auto d = index.acquire(at(0), 4096);
  EXPECT_EQ(calls.registered, 1);
  index.release(d.key);
  EXPECT_EQ(index.evict_idle(), 1u);
  EXPECT_EQ(calls.unregistered, 1);
  EXPECT_EQ(index.registrations(), 0u);
}

TEST_F(RegistrationIndexTest, OverlapWithARangeInUseIsRefused) {
  const auto a = index.acquire(at(4096), 4096);
  EXPECT_THROW(index.acquire(at(6000), 4096), AlreadyRegistered);
  EXPECT_THROW(index.acquire(at(0), 5000), AlreadyRegistered);
  EXPECT_NO_THROW(index.release(index.acquire(at(8192), 100).key)) << "adjacent, not overlapping";
  index.release(a.key);
}

TEST_F(RegistrationIndexTest, AnIdleOverlappingRangeGivesWayToALargerOne) {
  index.release(index.acquire(at(4096), 4096).key);
  const auto big = index.acquire(at(0), 3 * 4096);
  EXPECT_EQ(calls.registered, 2);
  EXPECT_EQ(calls.unregistered, 1);
  EXPECT_EQ(big.key, reinterpret_cast<std::uintptr_t>(at(0)));
  EXPECT_EQ(index.registrations(), 1u);
  index.release(big.key);
}

TEST_F(RegistrationIndexTest, BadRangesAreInvalid) {
  EXPECT_THROW(index.acquire(nullptr, 10), InvalidArgument);
  EXPECT_THROW(index.acquire(at(0), 0), InvalidArgument);
  EXPECT_EQ(calls.registered, 0);
}

}  // namespace
}  // namespace hostrt::test
