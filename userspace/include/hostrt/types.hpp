// Small value types shared by the hostrt headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace hostrt {

// Where a Device comes from. Drm: the edu_accel kernel driver through libdrm. Emulated: an
// in-process model of the same device semantics (mlock'ed memory, an engine thread, a 4 KiB
// device buffer) for machines without the driver. Never chosen implicitly.
enum class Backend { Drm, Emulated };

const char* to_string(Backend b) noexcept;

// A stream's priority (cudaStreamCreateWithPriority). The values are the C API's numbers,
// CUDA's convention: a lower number is a higher priority, so High < Normal < Low and the
// range is [High, Low] = [-1, 1]. Priority orders device work that is ready (its waits met)
// and not yet handed to the engine; it never preempts a running job (see Device::create_stream).
enum class StreamPriority : int { High = -1, Normal = 0, Low = 1 };

const char* to_string(StreamPriority p) noexcept;

// Direction of Stream::memcpy_async (the values match enum drm_edu_accel_op_type).
enum class CopyKind { H2D = 1, D2H = 2, H2H = 3 };

// An address in device memory. edu has exactly one piece of it: a 4096-byte buffer, so a
// device address is a byte offset into that buffer (0..4095). Transfers touching it must end
// at or before Capabilities::max_transfer (4095 on QEMU 7.2: a transfer ending at byte 4096
// kills the VM, so neither the driver nor hostrt lets one through).
//
// To pass a device address where the C++/C API takes void* (memcpy_async with CopyKind), it
// is encoded as the address edu itself uses for its buffer: kDeviceAddressBase + offset
// (0x40000..0x40fff). User space never maps that low (the ELF and heap live far above it),
// so a host pointer is never mistaken for a device one.
struct DevicePtr {
  static constexpr std::uintptr_t kDeviceAddressBase = 0x40000;
  static constexpr std::size_t kAddressSpan = 4096;

  std::uint64_t offset = 0;

  constexpr DevicePtr() = default;
  constexpr explicit DevicePtr(std::uint64_t off) : offset(off) {}

  // The void* form accepted by memcpy_async / hrtMemcpyAsync.
  void* as_void() const noexcept { return reinterpret_cast<void*>(kDeviceAddressBase + offset); }
  // The device address encoded in p, or nullopt when p is a host pointer.
  static std::optional<DevicePtr> from(const void* p) noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (a < kDeviceAddressBase || a >= kDeviceAddressBase + kAddressSpan) return std::nullopt;
    return DevicePtr(a - kDeviceAddressBase);
  }
  constexpr DevicePtr operator+(std::uint64_t n) const noexcept { return DevicePtr(offset + n); }
  friend constexpr bool operator==(DevicePtr, DevicePtr) = default;
};

// What GET_PARAM reports about a device (see enum drm_edu_accel_param).
struct Capabilities {
  std::uint32_t version_major = 0;
  std::uint32_t version_minor = 0;
  unsigned dma_mask_bits = 0;
  std::size_t device_buffer_size = 0;  // 4096
  std::size_t max_transfer = 0;        // 4095
  bool iommu = false;
  std::size_t max_bo_size = 0;
  std::size_t max_segment_size = 0;
  unsigned max_queues = 0;
  unsigned max_ops = 0;
  unsigned max_syncs = 0;         // in-syncs one job may carry (a stream's waits beyond: host-waited)
  std::size_t max_job_bytes = 0;  // device traffic per job (H2H twice); 0: no limit reported
};

// What hostrt knows about a host address (cudaPointerGetAttributes analogue).
enum class MemoryType {
  Pageable,    // unknown to hostrt: ordinary memory; copies stage it through pinned buffers
  Pinned,      // allocated by Device::host_alloc (a driver BO mapped into this process)
  Registered,  // pinned in place by Device::host_register (a userptr BO)
  Device,      // a DevicePtr encoded as void*
  Imported,    // a dma-buf imported by Device::import_dmabuf (another exporter's memory)
};

const char* to_string(MemoryType t) noexcept;

struct PointerAttributes {
  MemoryType type = MemoryType::Pageable;
  std::optional<std::size_t> device;  // device index (per backend), for all but Pageable
  Backend backend = Backend::Drm;     // meaningful when device is set
  std::uint32_t handle = 0;           // the BO's GEM handle (Pinned / Registered)
  void* base = nullptr;               // start of the allocation / registration
  std::size_t size = 0;               // its size
  std::size_t offset = 0;             // of the pointer from base (or into the device buffer)
  bool portable = false;              // usable by every device (kHost*Portable)
};

// host_alloc / host_register flags (hostrt's own; mapped onto the UAPI by the backend).
// Portable (cudaHostAllocPortable / cudaHostRegisterPortable): every device may copy to and
// from the memory, not only the one that allocated or registered it. Another device's first
// copy naming it gives that device its own handle to the same pages (a dma-buf import of a
// host_alloc BO; a second registration of a registered range, pinned and charged by that
// device too), released with the buffer.
inline constexpr unsigned kHostAllocPortable = 1u << 0;
inline constexpr unsigned kHostRegisterReadOnly = 1u << 0;  // device only reads the range
inline constexpr unsigned kHostRegisterPortable = 1u << 1;

}  // namespace hostrt
