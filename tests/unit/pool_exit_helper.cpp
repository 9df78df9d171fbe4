// A program whose static and thread_local objects free pool memory while the process or a
// thread exits, run by PoolExitTest as a subprocess (its exit status is the verdict):
//   static        a static pool and a static std::pmr::vector in it, freed by static
//                 destructors after the main thread's thread_locals are gone
//   thread_local  a thread_local std::pmr::vector made before the thread first used the pool,
//                 so it is destroyed after the pool's own per-thread state, on a worker thread
//                 and on the main thread
// Before the fix each mode died with SIGSEGV at exit.
#include <cstdio>
#include <cstring>
#include <memory_resource>
#include <thread>
#include <vector>

#include "hostrt/hostrt.hpp"
#include "hostrt/pool.hpp"

namespace {

hostrt::Device g_device = hostrt::Device::open(0, hostrt::Backend::Emulated);
hostrt::Stream g_stream = g_device.create_stream();
hostrt::Pool g_pool(g_device);
hostrt::PoolMemoryResource g_mr(g_pool, &g_stream);
hostrt::PoolMemoryResource g_mr_no_stream(g_pool);
std::pmr::vector<int> g_vector(&g_mr);
std::pmr::vector<int> g_vector_no_stream(&g_mr_no_stream);

void fill_thread_local() {
  thread_local std::pmr::vector<int> v(&g_mr);
  thread_local std::pmr::vector<long> w(&g_mr_no_stream);
  (void)v.size();  // constructed now, before this thread's first pool call
  (void)w.size();
  for (int i = 0; i < 1000; ++i) v.push_back(i);
  for (int i = 0; i < 100; ++i) w.push_back(i);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (std::strcmp(argv[1], "static") == 0) {
    for (int i = 0; i < 10000; ++i) g_vector.push_back(i);
    for (int i = 0; i < 100; ++i) g_vector_no_stream.push_back(i);
    g_stream.memcpy_async(hostrt::DevicePtr(0), g_vector.data(), 1024);
  } else if (std::strcmp(argv[1], "thread_local") == 0) {
    std::thread t(fill_thread_local);
    t.join();
    fill_thread_local();  // the main thread's, destroyed at exit
  } else {
    return 2;
  }
  std::printf("exiting\n");
  return 0;
}
