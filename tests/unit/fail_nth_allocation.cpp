// Fault injection for the pool tests: the test binary's operator new fails on request. In a
// translation unit of its own, so that the compiler does not inline this delete (free) into
// callers of the standard new and warn about a mismatch that is none (both use malloc).
#include <cstddef>
#include <cstdlib>
#include <new>

// The n-th allocation (counting from 0) on this thread throws std::bad_alloc; -1: none; set
// to -2 once it fired.
constinit thread_local long hostrt_test_fail_in = -1;

namespace {
void fail_if_due() {
  long& f = hostrt_test_fail_in;
  if (f >= 0 && f-- == 0) {
    f = -2;
    throw std::bad_alloc();
  }
}
}  // namespace

void* operator new(std::size_t n) {
  fail_if_due();
  if (void* p = std::malloc(n != 0 ? n : 1)) return p;
  throw std::bad_alloc();
}
// The pool's cache-line aligned objects (blocks, their side records and wait lists) too.
void* operator new(std::size_t n, std::align_val_t a) {
  fail_if_due();
  const auto al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
