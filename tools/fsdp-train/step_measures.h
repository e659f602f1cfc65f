#pragma once
// What fsdp-train measures on every rank around each optimizer step, and
// the peaks of it over the run:
//  - the most gathered parameter bytes at once (fsdp::memory_stats);
//  - the most tensor bytes at once (StepPeakMemory, peak_memory.h);
//  - the process's resident high-water mark;
//  - --device cuda: the caching allocator's peaks;
//  - --hook-times: the time inside FSDP's hooks (fsdp::HookTimer).

#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "fsdp/comm/process_group.h"
#include "fsdp/hook_timer.h"
#include "fsdp/sharded.h"
#include "metrics_log.h"
#include "peak_memory.h"
#include "training_device.h"

namespace fsdp_train {

// This rank's peaks over every step of the run.
struct RunPeaks {
  int64_t gathered = 0;
  int64_t tensors = 0;
  DevicePeakMemory device;
};

class StepMeasures {
 public:
  // Installs the counting allocator: construct before the model is built.
  explicit StepMeasures(c10::Device device) : device_(device) {}

  // --hook-times: times the hooks from here to stop_hook_timer(), around the
  // training loop (not the final checkpoint or the sample).
  void start_hook_timer() { hook_timer_.emplace(); }
  void stop_hook_timer() { hook_timer_.reset(); }

  // Starts the step's peaks, and drops hook time spent before it (the last
  // step's evaluation or checkpoint).
  void start_step(fsdp::UnitModule& model);
  // Fills `record`'s memory and hook figures with every rank's. Collective.
  void finish_step(fsdp::ProcessGroup& world, const fsdp::UnitModule& model, StepRecord& record);

  const RunPeaks& run_peaks() const { return run_; }

 private:
  const c10::Device device_;
  StepPeakMemory tensor_memory_;
  std::optional<fsdp::HookTimer> hook_timer_;
  RunPeaks run_;
};

}  // namespace fsdp_train
