#pragma once
// Live and peak bytes of CPU tensor memory, counted at the allocator.
//
//   auto& counter = fsdp::CpuAllocationCounter::install();
//   counter.reset_peak();
//   train_step();
//   std::cout << counter.peak_bytes() - before << " bytes at peak\n";
//
// install() puts a counting allocator in front of LibTorch's CPU allocator
// (c10::SetCPUAllocator), once per process. From then on every CPU tensor
// allocation is counted by its requested size, whatever the machine's load
// or the system allocator's rounding, so the same program gives the same
// numbers on every run: tests assert on them, benchmarks print them.
// Tensors allocated before install() are not counted, even when freed after.
// The counts are process-wide (all threads together).

#include <cstdint>

namespace fsdp {

class CpuAllocationCounter {
 public:
  // Installs the counter on first use; later calls return the same one.
  static CpuAllocationCounter& install();

  // Bytes of counted CPU tensor memory alive now.
  int64_t current_bytes() const;
  // The most alive at once since install() or the last reset_peak().
  int64_t peak_bytes() const;
  // Starts a new peak from the current level.
  void reset_peak();

 private:
  CpuAllocationCounter() = default;
};

}  // namespace fsdp
