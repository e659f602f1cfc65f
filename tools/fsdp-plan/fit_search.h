#pragma once
// `fsdp-plan --fit`: every setting that fits in memory, fastest first. The
// question a user has before spending a cluster: at this many machines,
// which strategy, reshard group, checkpointing, offload and micro-batch?

#include <vector>

#include "hardware_profile.h"
#include "memory_plan.h"
#include "model_spec.h"
#include "time_plan.h"
#include "training_setup.h"

namespace fsdp_plan {

struct Candidate {
  TrainingSetup setup;
  MemoryPlan memory;
  TimePlan time;
};

// Varies strategy, reshard group, activation checkpointing, offload and the
// micro-batch (grad_accum * micro_batch is kept: the global batch does not
// change) around `base`; returns the candidates that fit in the profile's
// memory, fastest first (within 1% in time, the smaller peak first).
// `headroom` is the fraction of memory left free.
std::vector<Candidate> search_fits(const ModelSpec& model, const TrainingSetup& base,
                                   const HardwareProfile& profile, const PlanOptions& options,
                                   double headroom);

// Whether a plan fits: the rank's resident peak (the device peak, the
// runtime and what the allocator keeps) within its memory less headroom,
// and offloaded state within the node's host memory.
bool fits_in(const MemoryPlan& memory, const TrainingSetup& setup, const HardwareProfile& profile,
             double headroom);

}  // namespace fsdp_plan
