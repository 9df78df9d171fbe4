// Uses the installed headers and library: one pinned round trip on an emulated device.
#include <cstring>
#include <hostrt/hostrt.hpp>

int main() {
  hostrt::Device d = hostrt::Device::open(0, hostrt::Backend::Emulated);
  hostrt::PinnedBuffer a = d.host_alloc(100), b = d.host_alloc(100);
  std::memset(a.data(), 0x5a, 100);
  hostrt::Stream s = d.create_stream();
  s.memcpy_async(hostrt::DevicePtr(0), a.data(), 100);
  s.memcpy_async(b.data(), hostrt::DevicePtr(0), 100);
  s.synchronize();
  return std::memcmp(a.data(), b.data(), 100) == 0 ? 0 : 1;
}
