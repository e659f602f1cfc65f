#pragma once
// A rank's peak memory during a step, as fsdp-plan predicts it and
// `fsdp-plan validate` compares it:
//  - tensor bytes, counted at LibTorch's CPU allocator
//    (fsdp::CpuAllocationCounter): deterministic, so a plan is checked
//    against them to within a few percent;
//  - resident bytes (VmHWM in /proc/self/status): what the kernel saw,
//    including the runtime's own memory and the allocator's slack.
//
// [Note: what the trainer's memory figures cover]
// The counter is installed before the model is built, and its peak is reset
// at the start of every step, so each step's figure is that step's own peak
// (the first one includes AdamW creating its moments). VmHWM is the
// process's high-water mark since it started, model building included: the
// planner's resident figure is a whole-run peak for the same reason.
// Counting adds about 100 ns to each allocation (an alloc and free of a
// small tensor: 310-350 ns without, 410-480 ns with), well under 1% of a
// training step.

#include <cstdint>

#include "fsdp/cpu_allocation_counter.h"

namespace fsdp_train {

class StepPeakMemory {
 public:
  // Installs the counting allocator; construct before the model is built.
  StepPeakMemory();
  // Starts a step's peak from the bytes alive now.
  void start_step();
  // The most tensor bytes alive at once since start_step().
  int64_t step_peak_tensor_bytes() const;

 private:
  fsdp::CpuAllocationCounter& counter_;
};

// VmHWM from /proc/self/status in bytes, or 0 where it cannot be read.
int64_t peak_resident_bytes();

}  // namespace fsdp_train
