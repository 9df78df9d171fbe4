// The inspection edu-inspect runs: each section printed for a reader new to the driver, a
// SUMMARY line per section for scripts (scripts/tour.sh), and with --check the consistency
// checks between the views.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hostrt/hostrt.hpp"
#include "inspect/layout.hpp"
#include "inspect/probe.hpp"

namespace inspect {

struct Options {
  std::size_t device = 0;
  std::uint64_t size = std::uint64_t{1} << 20;
  bool userptr = true, bo = true, copy = false, pool = false, above_mask = false, check = false, hold = false,
       full = false;
  std::string xlate;
};

class Inspector {
 public:
  explicit Inspector(const Options& o);
  ~Inspector();
  Inspector(const Inspector&) = delete;
  Inspector& operator=(const Inspector&) = delete;
  void run();
  // Prints how many checks passed; the exit status: 0, or 1 when one failed.
  int report_checks() const;

 private:
  void header();
  void make_userptr();
  void make_bo();
  void describe(Buffer& b);
  void show_pins(const PinCounters& before, const char* what);
  void check_layout(const Buffer& b);
  void copy();
  void write_xlate(const std::vector<Xfer>& xfers);
  void pool_demo();
  void* map_user_memory();
  void check(bool ok, const std::string& what);

  Options o_;
  hostrt::Device dev_;
  int fd_ = -1;
  std::string debugfs_;
  std::string pci_;  // how dma-api/dump names the device
  std::uint64_t client_ = 0;
  unsigned mask_bits_ = 0;
  bool iommu_ = false, bounce_ = false;
  std::vector<void*> maps_;  // user memory, and the pages held to push it above the mask
  void* user_ = nullptr;
  hostrt::PinnedBuffer reg_, alloc_;
  Buffer ub_, bb_;
  PinCounters start_;
  int checks_ = 0, failed_ = 0;
};

}  // namespace inspect
