#pragma once
// One optimizer step's time for a model, a setup and a machine: compute,
// communication, and the part of communication that prefetch does not hide
// (docs/planner.md, "Time").

#include "hardware_profile.h"
#include "model_spec.h"
#include "training_setup.h"

namespace fsdp_plan {

struct TimePlan {
  double compute_s = 0;        // forward, backward and recomputation, all micro-batches
  double optimizer_s = 0;      // the optimizer step over this rank's shards
  double communication_s = 0;  // every collective, as if run alone
  double exposed_comm_s = 0;   // what the step waits for
  double sync_overhead_s = 0;  // ring_steps x the profile's cost per ring step
  double ring_steps = 0;       // send/receive steps of every collective, one step
  double offload_s = 0;        // shards to the device and reduced shards back (waited for)
  double step_s = 0;
  double tokens_per_s = 0;     // all ranks together
  double mfu = 0;              // model flops achieved / peak, per rank
  double model_flops_per_token = 0;  // 3x forward (recomputation not counted)
  // Bytes one rank sends per step, all collectives (ring: (p-1)/p of each buffer).
  double bytes_sent = 0;
};

// The optimizer step's cost in passes over the fp32 shard at the profile's
// (copy) memory bandwidth ([Note: the optimizer's passes over the shard]).
double optimizer_passes(Optimizer optimizer);

TimePlan plan_time(const ModelSpec& model, const TrainingSetup& setup,
                   const HardwareProfile& profile);

}  // namespace fsdp_plan
