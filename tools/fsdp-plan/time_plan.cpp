#include "time_plan.h"

#include <algorithm>
#include <vector>

#include "collective_cost.h"
#include "memory_plan.h"

namespace fsdp_plan {
namespace {

// Per unit, in forward order: its compute and its collectives for one
// micro-batch (gathers) or one step (reductions).
struct UnitTimes {
  double forward_s = 0, backward_s = 0;
  double forward_gather_s = 0, backward_gather_s = 0, reduce_s = 0;
  double gather_bytes_sent = 0, reduce_bytes_sent = 0;
  double gather_ring_steps = 0, reduce_ring_steps = 0;  // per micro-batch, per step
};

// [Note: exposed communication]
// A prefetched gather runs while the unit before it computes, so only what
// exceeds that compute is waited for; the first gather of each pass is
// always waited for. A reduction runs while backward computes the unit
// before it, and the last one is waited for at the end of backward. Without
// prefetch every gather is waited for. Only the profile's overlap fraction
// of a collective proceeds while the rank computes: all of it on a GPU
// (copy engines, NCCL's SMs aside); on CPU ranks Gloo competes with compute
// for the same cores, so the rest is waited for too.
double hidden(double collective_s, double compute_s, double overlap) {
  return std::min(overlap * collective_s, compute_s);
}

double exposed(const std::vector<UnitTimes>& units, const TrainingSetup& s, double overlap) {
  double forward = 0, backward = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const double behind = s.prefetch && i > 0 ? units[i - 1].forward_s : 0;
    forward += units[i].forward_gather_s - hidden(units[i].forward_gather_s, behind, overlap);
  }
  // Backward runs the units in reverse; unit i's gather hides behind unit
  // i+1's backward, its reduction behind unit i-1's.
  for (size_t k = units.size(); k-- > 0;) {
    const double behind = s.prefetch && k + 1 < units.size() ? units[k + 1].backward_s : 0;
    backward += units[k].backward_gather_s - hidden(units[k].backward_gather_s, behind, overlap);
  }
  return static_cast<double>(s.grad_accum) * (forward + backward);
}

double exposed_reductions(const std::vector<UnitTimes>& units, double overlap) {
  double waited = 0;
  for (size_t k = units.size(); k-- > 0;) {
    const double behind = k > 0 ? units[k - 1].backward_s : 0;
    waited += units[k].reduce_s - hidden(units[k].reduce_s, behind, overlap);
  }
  return waited;
}

}  // namespace

// [Note: the optimizer's passes over the shard]
// LibTorch's optimizers run one kernel per operation, each streaming whole
// tensors: AdamW's step is nine kernels (weight decay, two for each moment,
// the denominator's square root, division and epsilon, the update), 22
// reads and writes of a shard-sized fp32 tensor; SGD with momentum's is
// three (8 reads and writes), plain SGD's one (3). The profile's memory
// bandwidth is a copy's (a read and a write per element), so the plan
// charges each step in copy-passes, as `fsdp-bench optimizer` measures
// them. On this project's 2-core VM at 4 M and 16 M elements, with one
// thread (a rank's share when ranks share the cores), AdamW took 12.4-15.1,
// SGD with momentum 4.2-4.9 and SGD 1.8-2.0 (two runs); with two threads,
// 11.9-13.9, 4.3-4.6 and 1.7-2.0. A first, uninterleaved measurement gave
// AdamW 13.6-19.5. The plan charges 16, 5 and 2 (16 is what validation in
// docs/planner.md ran with). Before, it charged AdamW 10 passes, a minimal
// fused step, and SGD 6.
double optimizer_passes(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kAdamW: return 16;
    case Optimizer::kSgdMomentum: return 5;
    case Optimizer::kSgd: return 2;
  }
  return 0;
}

namespace {

// What every unit's times share: the micro-batch, the hardware's rates, and
// the rings its collectives run on.
struct UnitCostModel {
  double tokens = 0;          // per micro-batch on a rank
  double flops_per_s = 0;     // achieved
  double unit_overhead = 0;   // the framework's fixed cost per unit and micro-batch
  double element_bytes = 4;   // of a gathered parameter
  int shard_size = 1;         // S: ranks a parameter is sharded over
  const Link* shard_link = nullptr;
  int regather_size = 1;      // ranks backward's re-gather runs over
  const Link* regather_link = nullptr;
};

UnitCostModel unit_cost_model(const ModelSpec& m, const TrainingSetup& s,
                              const HardwareProfile& hw) {
  UnitCostModel c;
  c.tokens = static_cast<double>(s.micro_batch) *
             static_cast<double>(s.seq_len > 0 ? s.seq_len : m.tokens_per_sample);
  c.flops_per_s = hw.achieved_flops(s.bf16);
  c.unit_overhead = hw.unit_overhead(s.bf16);
  c.element_bytes = s.bf16 ? 2 : 4;
  c.shard_size = s.shard_size();
  c.shard_link = &ring_link(c.shard_size, s.nproc_per_node, hw);
  c.regather_size = s.reshard_group > 1 ? s.reshard_group : c.shard_size;
  c.regather_link = &ring_link(c.regather_size, s.nproc_per_node, hw);
  return c;
}

// One unit's compute and collectives; `recompute`: its forward runs again
// in backward (activation checkpointing).
UnitTimes unit_times(const UnitSpec& u, bool recompute, const UnitCostModel& c,
                     const TrainingSetup& s, const HardwareProfile& hw) {
  UnitTimes ut;
  // A unit's fixed cost is split like its flops: a third forward.
  const double flops_s = u.forward_flops_per_token * c.tokens / c.flops_per_s;
  ut.forward_s = flops_s + c.unit_overhead / 3;
  ut.backward_s = (recompute ? 3 : 2) * flops_s + 2 * c.unit_overhead / 3;
  const int S = c.shard_size;
  const double e = c.element_bytes;
  const double padded = static_cast<double>(shard_numel(u.numel(), S)) * S;
  if (S > 1) {
    const bool gathered_twice = s.regathers_in_backward() && !u.root;
    const int k = c.regather_size;
    ut.forward_gather_s = ring_all_gather_s(padded * e, S, *c.shard_link);
    if (gathered_twice) ut.backward_gather_s = ring_all_gather_s(padded * e, k, *c.regather_link);
    ut.reduce_s = ring_reduce_scatter_s(padded * 4, S, *c.shard_link);
    ut.gather_ring_steps = (S - 1) + (gathered_twice ? k - 1 : 0);
    ut.reduce_ring_steps = S - 1;
    const double per_byte = static_cast<double>(S - 1) / S;
    ut.gather_bytes_sent = per_byte * padded * e * (gathered_twice ? 2 : 1);
    ut.reduce_bytes_sent = per_byte * padded * 4;
  }
  const int replicas = s.world_size() / S;
  if (replicas > 1) {  // hybrid across nodes, or NO_SHARD: all-reduce the (shard) gradient
    const double shard_bytes = static_cast<double>(shard_numel(u.numel(), S)) * 4;
    ut.reduce_s += ring_all_reduce_s(shard_bytes, replicas, hw.inter_node);
    ut.reduce_bytes_sent += 2.0 * (replicas - 1) / replicas * shard_bytes;
    ut.reduce_ring_steps += 2 * (replicas - 1);
  }
  return ut;
}

// Adds a unit's share of a step: gathers and compute once per micro-batch,
// the reduction once per step.
void add_unit(const UnitTimes& ut, int64_t grad_accum, TimePlan& t) {
  const auto micro_batches = static_cast<double>(grad_accum);
  t.ring_steps += micro_batches * ut.gather_ring_steps + ut.reduce_ring_steps;
  t.compute_s += micro_batches * (ut.forward_s + ut.backward_s);
  t.communication_s += micro_batches * (ut.forward_gather_s + ut.backward_gather_s) + ut.reduce_s;
  t.bytes_sent += micro_batches * ut.gather_bytes_sent + ut.reduce_bytes_sent;
}

}  // namespace

TimePlan plan_time(const ModelSpec& m, const TrainingSetup& s, const HardwareProfile& hw) {
  const UnitCostModel cost = unit_cost_model(m, s, hw);
  std::vector<UnitTimes> units;
  TimePlan t;
  size_t block = 0;
  for (const auto& u : m.units) {
    const bool recompute =
        !u.root && s.checkpoint_every > 0 && block++ % static_cast<size_t>(s.checkpoint_every) == 0;
    units.push_back(unit_times(u, recompute, cost, s, hw));
    add_unit(units.back(), s.grad_accum, t);
    t.model_flops_per_token += 3 * u.forward_flops_per_token;
  }
  t.exposed_comm_s = exposed(units, s, hw.comm_compute_overlap) +
                     exposed_reductions(units, hw.comm_compute_overlap);
  double shard_elements = 0;
  for (const auto& u : m.units) {
    shard_elements += static_cast<double>(shard_numel(u.numel(), cost.shard_size));
  }
  t.optimizer_s = optimizer_passes(s.optimizer) * 4 * shard_elements /
                  (s.offload ? hw.host_memory_bytes_per_s : hw.memory_bytes_per_s);
  if (s.offload) {
    // Each gather copies the shard in; each reduction copies its shard out.
    const double gathers = s.regathers_in_backward() ? 2 : 1;
    const double in =
        static_cast<double>(s.grad_accum) * gathers * shard_elements * cost.element_bytes;
    t.offload_s = (in + 4 * shard_elements) / hw.host_link_bytes_per_s;
  }
  // [Note: synchronization calibrated on sharded steps] in calibrate.cpp.
  t.sync_overhead_s = t.ring_steps * hw.sync_per_ring_step(s.bf16);
  t.step_s = t.compute_s + t.exposed_comm_s + t.sync_overhead_s + t.optimizer_s + t.offload_s;
  const double global_tokens = cost.tokens * static_cast<double>(s.grad_accum) * s.world_size();
  t.tokens_per_s = global_tokens / t.step_s;
  const double peak = s.bf16 ? hw.peak_flops_bf16 : hw.peak_flops_fp32;
  t.mfu = t.model_flops_per_token * t.tokens_per_s / s.world_size() / peak;
  return t;
}

}  // namespace fsdp_plan
