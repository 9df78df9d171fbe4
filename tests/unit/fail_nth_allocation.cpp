// Fault injection for the pool tests: the test binary's operator new fails on request. In a
// translation unit of its own, so that the compiler does not inline this delete (free) into
// callers of the standard new and warn about a mismatch that is none (both use malloc).
#include <cstddef>
#include <cstdlib>
#include <new>

// The n-th allocation (counting from 0) on this thread throws std::bad_alloc; -1: none; set
// to -2 once it fired.
constinit thread_local long hostrt_test_fail_in = -1;

void* operator new(std::size_t n) {
  long& f = hostrt_test_fail_in;
  if (f >= 0 && f-- == 0) {
    f = -2;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
