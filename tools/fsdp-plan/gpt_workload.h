#pragma once
// A few training steps of a small demo GPT as fsdp-train takes them (each
// block an FSDP unit; forward, backward, gradient clipping, AdamW), on this
// rank alone or sharded over a group: what `fsdp-plan calibrate` measures
// the machine on, so the profile describes the workload the planner models.

#include <memory>

#include "fsdp/comm/process_group.h"
#include "model_spec.h"

namespace fsdp_plan {

struct WorkloadResult {
  double step_s = 0;        // median over the timed steps
  double tensor_peak = 0;   // counted tensor bytes at the peak
  double resident_beyond = 0;  // VmHWM above the runtime and the tensor peak
};

// Runs `steps` timed steps (after one untimed) at `batch` sequences of the
// GPT of `sizes`, in fp32 or in bf16 mixed precision (fp32 reductions, as
// fsdp-train's). With `group`, every rank of it runs the same steps, the
// model fully sharded over it (collective); without, this rank alone.
// Installs fsdp::CpuAllocationCounter.
WorkloadResult run_gpt_workload(const GptSizes& sizes, int64_t batch, int steps, bool bf16 = false,
                                std::shared_ptr<fsdp::ProcessGroup> group = nullptr);

}  // namespace fsdp_plan
