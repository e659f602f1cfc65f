#pragma once
// What fsdp-plan prints: one plan as a table or JSON, and --fit's list.

#include <string>
#include <vector>

#include "fit_search.h"
#include "hardware_profile.h"
#include "memory_plan.h"
#include "model_spec.h"
#include "time_plan.h"
#include "training_setup.h"

namespace fsdp_plan {

struct Plan {
  const ModelSpec* model = nullptr;
  TrainingSetup setup;
  const HardwareProfile* profile = nullptr;
  MemoryPlan memory;
  TimePlan time;
  bool fits = false;
  double headroom = 0;
};

std::string format_plan(const Plan& plan);
std::string plan_json(const Plan& plan);  // pretty-printed

// One line per setting: strategy, group, checkpointing, offload, micro-batch,
// peak memory, step time, tokens/s, MFU. At most `top` lines.
std::string format_fits(const std::vector<Candidate>& fits, size_t top, const HardwareProfile& hw);
std::string fits_json(const std::vector<Candidate>& fits, size_t top);

// A setting in fsdp-train's flags (--strategy full --activation-checkpointing all ...).
std::string setup_flags(const TrainingSetup& setup);

// "1.23 GiB" style.
std::string human_bytes(double bytes);

}  // namespace fsdp_plan
