#include "published_anchors.h"

#include <fmt/format.h>

#include <algorithm>

#include "memory_plan.h"
#include "plan_report.h"

namespace fsdp_plan {

double zero_paper_bytes(int stage, double psi, double nd, double k) {
  switch (stage) {
    case 0: return (2 + 2 + k) * psi;
    case 1: return 4 * psi + k * psi / nd;
    case 2: return 2 * psi + (2 + k) * psi / nd;
    default: return (2 + 2 + k) * psi / nd;
  }
}

DeepSpeedZero3Estimate deepspeed_zero3_estimate(double p, double l, int g, int n, bool offload_optimizer,
                                                bool offload_params, bool zero_init, double f) {
  const double gpus = static_cast<double>(g) * n;
  const double largest = 4 * l;
  DeepSpeedZero3Estimate e;
  if (offload_optimizer && offload_params) {
    e.gpu_bytes = largest;
    e.cpu_bytes = zero_init ? 18 * p * f / n : p * std::max(4.0 * g, 18.0 / n) * f;
  } else if (offload_optimizer) {
    e.gpu_bytes = largest + 2 * p / gpus;
    e.cpu_bytes = zero_init ? 16 * p * f / n : p * std::max(4.0 * g, 16.0 / n) * f;
  } else {
    e.gpu_bytes = largest + 18 * p / gpus;
    e.cpu_bytes = zero_init ? 4 * l * g * f : 4 * p * g * f;
  }
  return e;
}

namespace {

// fsdp-plan's model states (sharded parameters, gradients and AdamW state,
// fp32) per rank for `params` elements in one unit over `ranks` ranks.
double plan_model_states(double params, int ranks, Strategy strategy) {
  ModelSpec m;
  UnitSpec u;
  u.param_numels = {static_cast<int64_t>(params)};
  m.units.push_back(u);
  TrainingSetup s;
  s.nproc_per_node = ranks;
  s.strategy = strategy;
  const MemoryPlan plan = plan_memory(m, s);
  return plan.sharded_params + plan.sharded_grads + plan.optimizer_state;
}

}  // namespace

std::string format_anchors() {
  constexpr double kGB = 1e9, kGiB = 1024.0 * 1024 * 1024;
  std::string out =
      "ZeRO paper, 7.5B parameters, 64 devices, mixed-precision Adam (K = 12), GB per device\n"
      "  stage  published  formula  fsdp-plan (fp32 master, grads, AdamW)\n";
  const double psi = 7.5e9;
  const double published[] = {120, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    std::string ours = "-";
    if (stage == 0) ours = fmt::format("{:.3f} (none)", plan_model_states(psi, 1, Strategy::kFullShard) / kGB);
    if (stage == 3) ours = fmt::format("{:.3f} (full)", plan_model_states(psi, 64, Strategy::kFullShard) / kGB);
    out += fmt::format("  {:>5}  {:>9.1f}  {:>7.3f}  {}\n", stage, published[stage],
                       zero_paper_bytes(stage, psi, 64) / kGB, ours);
  }
  out +=
      "\nDeepSpeed estimate_zero3_model_states_mem_needs, GB (GiB, as it prints)\n"
      "  model       GPUs  offload     zero_init  published GPU/CPU  formula GPU/CPU\n";
  struct Row {
    const char* model;
    double p, l;
    int g;
    bool opt, par, init;
    double gpu, cpu;
  };
  const Row rows[] = {
      {"t5-3b", 2851e6, 32e6, 8, true, true, true, 0.12, 71.69},
      {"t5-3b", 2851e6, 32e6, 8, true, false, true, 0.78, 63.72},
      {"t5-3b", 2851e6, 32e6, 8, false, false, true, 6.09, 1.43},
      {"T0_3B", 2783e6, 65e6, 1, true, true, true, 0.25, 70.00},
      {"T0_3B", 2783e6, 65e6, 1, true, false, true, 5.43, 62.23},
      {"T0_3B", 2783e6, 65e6, 1, false, false, true, 46.91, 0.37},
      {"T0_3B", 2783e6, 65e6, 1, false, false, false, 46.91, 15.56},
  };
  for (const Row& r : rows) {
    const auto e = deepspeed_zero3_estimate(r.p, r.l, r.g, 1, r.opt, r.par, r.init);
    out += fmt::format("  {:<10} {:>5}  {:<10}  {:>9}  {:>8.2f} {:>8.2f}  {:>7.2f} {:>7.2f}\n", r.model, r.g,
                       r.par ? "opt+param" : r.opt ? "opt" : "none", r.init ? 1 : 0, r.gpu, r.cpu,
                       e.gpu_bytes / kGiB, e.cpu_bytes / kGiB);
  }
  out += fmt::format(
      "\nfsdp-plan's model states for t5-3b on 8 ranks (full, no offload): {} per rank, "
      "16 bytes a parameter over 8; DeepSpeed charges 18 (an fp16 copy) plus 4 L.\n",
      human_bytes(plan_model_states(2851e6, 8, Strategy::kFullShard)));
  return out;
}

}  // namespace fsdp_plan
