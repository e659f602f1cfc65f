#include "fit_search.h"

#include <algorithm>
#include <cmath>

namespace fsdp_plan {
namespace {

std::vector<Strategy> strategies_for(const TrainingSetup& base) {
  std::vector<Strategy> all = {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard};
  if (base.nnodes > 1) {
    all.push_back(Strategy::kHybridShard);
    all.push_back(Strategy::kHybridShardZero2);
  }
  return all;
}

// Micro-batches that divide the samples each rank takes per step.
std::vector<int64_t> micro_batches_for(const TrainingSetup& base) {
  const int64_t per_rank = base.micro_batch * base.grad_accum;
  std::vector<int64_t> out;
  for (int64_t mb = 1; mb <= per_rank; ++mb) {
    if (per_rank % mb == 0) out.push_back(mb);
  }
  return out;
}

}  // namespace

bool fits_in(const MemoryPlan& memory, const TrainingSetup& setup, const HardwareProfile& hw,
             double headroom) {
  const double usable = (1 - headroom) * hw.memory_bytes;
  const double host_usable = (1 - headroom) * hw.host_memory_bytes;
  return hw.resident_bytes(memory.device_peak) <= usable &&
         memory.host_bytes * setup.nproc_per_node <= host_usable;
}

std::vector<Candidate> search_fits(const ModelSpec& model, const TrainingSetup& base,
                                   const HardwareProfile& hw, const PlanOptions& options,
                                   double headroom) {
  std::vector<Candidate> fitting;
  const int blocks = static_cast<int>(model.units.size()) - (model.root() ? 1 : 0);
  for (Strategy strategy : strategies_for(base)) {
    for (int group : {0, base.nproc_per_node}) {
      for (int every : {0, 2, 1}) {
        if (every > std::max(blocks, 1)) continue;
        for (bool offload : {false, true}) {
          for (int64_t mb : micro_batches_for(base)) {
            TrainingSetup s = base;
            s.strategy = strategy;
            s.reshard_group = group > 1 && group < s.shard_size() ? group : 0;
            if (group > 1 && s.reshard_group == 0) continue;  // not applicable: skip the duplicate
            if (s.reshard_group && strategy != Strategy::kFullShard) continue;
            s.checkpoint_every = every;
            s.offload = offload;
            s.grad_accum = base.micro_batch * base.grad_accum / mb;
            s.micro_batch = mb;
            if (!setup_problem(s).empty()) continue;
            Candidate c{s, plan_memory(model, s, options), plan_time(model, s, hw)};
            if (fits_in(c.memory, s, hw, headroom)) fitting.push_back(c);
          }
        }
      }
    }
  }
  // Fastest first; settings within 1% of each other in time (one bucket of
  // a log scale) by the memory they leave free.
  const auto bucket = [](const Candidate& c) { return std::floor(std::log(c.time.step_s) / std::log(1.01)); };
  std::stable_sort(fitting.begin(), fitting.end(), [&](const Candidate& a, const Candidate& b) {
    const double ba = bucket(a), bb = bucket(b);
    return ba != bb ? ba < bb : a.memory.device_peak < b.memory.device_peak;
  });
  return fitting;
}

}  // namespace fsdp_plan
