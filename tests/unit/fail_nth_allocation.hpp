// Fault injection for host tests: fail_nth_allocation.cpp's operator new fails the n-th
// allocation of the calling thread, armed and disarmed by FailNthAllocation.
#pragma once

// The n-th allocation (counting from 0) on this thread throws std::bad_alloc; -1: none.
extern constinit thread_local long hostrt_test_fail_in;

namespace hostrt::test {

struct FailNthAllocation {
  explicit FailNthAllocation(long n) { hostrt_test_fail_in = n; }
  ~FailNthAllocation() { hostrt_test_fail_in = -1; }
  FailNthAllocation(const FailNthAllocation&) = delete;
  FailNthAllocation& operator=(const FailNthAllocation&) = delete;
  bool fired() const { return hostrt_test_fail_in < -1; }
};

}  // namespace hostrt::test
