#include "memory_plan.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fsdp_plan {
namespace {

constexpr double kFp32 = 4;

double compute_bytes(const TrainingSetup& s) { return s.bf16 ? 2 : 4; }

double tokens_of(const ModelSpec& m, const TrainingSetup& s) {
  return static_cast<double>(s.micro_batch) *
         static_cast<double>(s.seq_len > 0 ? s.seq_len : m.tokens_per_sample);
}

// One unit's bytes in the terms libfsdp allocates.
struct UnitBytes {
  bool root = false;
  double gathered = 0;    // its gathered buffer (0 when nothing is sharded)
  double chunk = 0;       // the 1/k chunk a k-group reshard keeps after forward
  double reduce = 0;      // its reduction's buffer
  double full_grads = 0;  // autograd's gradients before the reduction takes them
  double kept = 0;        // activations kept for its backward
  double recompute = 0;   // internals a checkpointed unit rebuilds in backward
  double workspace = 0;   // its backward's own gradients, beyond what it keeps
};

// Per unit: a row per shard rank plus the result row, each the shard plus a
// used-flag per parameter, in fp32 (the reduce dtype); NO_SHARD replicas
// all-reduce one row ([Note: bounded gradient reductions] in
// src/grad_reduction_queue.h).
std::vector<UnitBytes> unit_bytes(const ModelSpec& m, const TrainingSetup& s) {
  const int S = s.shard_size();
  const bool reduces = S > 1 || s.world_size() > 1;
  const double e = compute_bytes(s), scale = e / kFp32, tokens = tokens_of(m, s);
  std::vector<UnitBytes> out;
  size_t block = 0;
  for (const auto& u : m.units) {
    UnitBytes b;
    b.root = u.root;
    const double padded = static_cast<double>(shard_numel(u.numel(), S)) * S;
    if (S > 1) b.gathered = padded * e;
    if (S > 1 && s.reshard_group > 1 && !u.root) b.chunk = padded / s.reshard_group * e;
    if (reduces) {
      const double row = static_cast<double>(shard_numel(u.numel(), S)) + static_cast<double>(u.param_numels.size());
      b.reduce = (S > 1 ? S + 1 : 1) * row * kFp32;
    }
    // [Note: full gradients until the reduction is finished] Sharded units
    // copy autograd's gradients into the reduction's buffer and drop them.
    // Unsharded ones with replicas (NO_SHARD) keep them on the parameters
    // until the reduced values are installed, which happens when the next
    // unit issues its reduction: two units' worth at a time.
    if (S > 1 || s.world_size() > 1) b.full_grads = static_cast<double>(u.numel()) * e;
    const bool checkpointed = !u.root && s.checkpoint_every > 0 &&
                              block++ % static_cast<size_t>(s.checkpoint_every) == 0;
    b.kept = tokens * scale * (checkpointed ? u.checkpointed_bytes_per_token : u.activation_bytes_per_token);
    if (checkpointed) b.recompute = tokens * scale * u.activation_bytes_per_token;
    b.workspace = tokens * scale * u.backward_workspace_bytes_per_token;
    out.push_back(b);
  }
  return out;
}

// [Note: the phases of a step's peak]
// Forward only adds activations, so the peak is in backward, at one of:
//  - the loss's backward: every unit's activations and the loss's fp32
//    logits and log_softmax output (the loss is computed in fp32: under bf16
//    the logits are cast and the bf16 ones, which nothing saves, are freed),
//    two fp32 gradients of that size (the bf16 one comes once log_softmax's
//    is freed), what forward left gathered (the
//    root; every unit without resharding) and the root's full gradients
//    (the tied head's, here);
//  - the start of each unit's backward, last to first: the activations of
//    the units not yet done and this one's (rebuilt first if checkpointed),
//    its backward's workspace, the gradient flowing into it, what is
//    gathered then, the root's full gradients, and the previous unit's
//    reduction in flight;
//  - the moment it issues its reduction: its activations are gone, its full
//    gradients are copied into its buffer while the previous reduction is
//    still in flight.
// Gathered in a unit's backward: with resharding, the root, this unit and
// what prefetch has in flight before it; without (grad-op, no reshard), the
// root and every unit not yet done. k-group chunks stay until their unit's
// backward. A unit's backward workspace is the model's to state
// (UnitSpec::backward_workspace_bytes_per_token); temporaries smaller than
// it are left out.
struct Phase {
  std::string name;
  double gathered = 0, reduce = 0, grads = 0, acts = 0, head = 0;
  double total() const { return gathered + reduce + grads + acts + head; }
};

std::vector<Phase> backward_phases(const ModelSpec& m, const TrainingSetup& s) {
  const std::vector<UnitBytes> units = unit_bytes(m, s);
  const double e = compute_bytes(s), tokens = tokens_of(m, s);
  const double logits = tokens * static_cast<double>(m.logits_per_token);
  const double loss_kept = logits * 2 * kFp32;  // fp32 logits (cast if need be), log_softmax's
  const double loss_grads = logits * 2 * kFp32;  // two fp32 gradients at a time
  const double boundary = tokens * m.boundary_bytes_per_token * e / kFp32;
  double root_gathered = 0, root_grads = 0, all_kept = 0, all_chunks = 0, all_gathered = 0;
  for (const auto& u : units) {
    all_kept += u.kept;
    all_chunks += u.chunk;
    all_gathered += u.gathered;
    if (u.root) root_gathered = u.gathered, root_grads = u.full_grads;
  }
  const double gathered_after_forward = s.regathers_in_backward() ? root_gathered + all_chunks : all_gathered;
  std::vector<Phase> phases;
  phases.push_back({"loss backward", gathered_after_forward, 0, root_grads, all_kept + loss_kept, loss_grads});
  const int in_flight = s.prefetch ? s.max_inflight_all_gathers : 1;
  double kept_before = 0, chunks_before = 0;  // of the units before k
  std::vector<double> kept_until(units.size()), chunks_until(units.size());
  for (size_t k = 0; k < units.size(); ++k) {
    kept_until[k] = kept_before;
    chunks_until[k] = chunks_before;
    if (!units[k].root) kept_before += units[k].kept, chunks_before += units[k].chunk;
  }
  const int S = s.shard_size();
  double previous_reduce = 0, previous_grads = 0;
  for (size_t k = units.size(); k-- > 0;) {
    const UnitBytes& u = units[k];
    if (u.root) continue;
    Phase p;
    p.name = "backward of " + m.units[k].name;
    double gathered = 0;
    int alive = 0;
    for (size_t j = k + 1; j-- > 0;) {
      if (units[j].root) continue;
      if (s.regathers_in_backward() && alive == in_flight) break;
      gathered += units[j].gathered;
      ++alive;
    }
    p.gathered = root_gathered + gathered + chunks_until[k] + u.chunk;
    p.acts = kept_until[k] + std::max(u.kept, u.recompute) + u.workspace + boundary;
    p.grads = root_grads + (S == 1 ? previous_grads : 0);
    p.reduce = previous_reduce;
    phases.push_back(p);
    p.name = "reduction of " + m.units[k].name;
    p.acts = kept_until[k] + boundary;
    p.grads += u.full_grads;
    p.reduce = previous_reduce + u.reduce;
    phases.push_back(p);
    previous_reduce = u.reduce;
    previous_grads = u.full_grads;
  }
  return phases;
}

// [Note: communication scratch] Each Gloo group keeps one buffer for the
// chunks its ring reduce-scatters and all-reduces receive, sized by the
// largest so far (src/comm/gloo_group.cpp): a shard row (shard plus flags)
// for the shard group, a 1/R slice of what replicas all-reduce for the
// replica group.
double comm_scratch(const ModelSpec& m, const TrainingSetup& s) {
  const int S = s.shard_size();
  const int replicas = s.world_size() / S;
  double shard_row = 0, replica_chunk = 0;
  for (const auto& u : m.units) {
    const double row = static_cast<double>(shard_numel(u.numel(), S)) + static_cast<double>(u.param_numels.size());
    if (S > 1) shard_row = std::max(shard_row, row);
    if (replicas > 1) replica_chunk = std::max(replica_chunk, std::ceil(row / replicas));
  }
  return kFp32 * (shard_row + replica_chunk);
}

}  // namespace

MemoryPlan plan_memory(const ModelSpec& m, const TrainingSetup& s, const PlanOptions& options) {
  MemoryPlan p;
  const int S = s.shard_size();
  double shard_elements = 0, full_elements = 0, largest = 0;
  for (const auto& u : m.units) {
    shard_elements += static_cast<double>(shard_numel(u.numel(), S));
    full_elements += static_cast<double>(u.numel());
    if (!u.root) largest = std::max(largest, static_cast<double>(u.numel()));
  }
  p.sharded_params = kFp32 * shard_elements;
  p.sharded_grads = kFp32 * shard_elements;
  p.optimizer_state = kFp32 * shard_elements * optimizer_states_per_param(s.optimizer);
  p.comm_buffers = comm_scratch(m, s);
  const std::vector<Phase> phases = backward_phases(m, s);
  const Phase& peak = *std::max_element(phases.begin(), phases.end(), [](const Phase& a, const Phase& b) {
    return a.total() < b.total();
  });
  p.peak_phase = peak.name;
  p.gathered_params = peak.gathered;
  p.reduce_buffers = peak.reduce;
  p.unsharded_grads = peak.grads;
  p.activations = peak.acts;
  p.head_transient = peak.head;
  const double persistent = p.sharded_params + p.sharded_grads + p.optimizer_state;
  p.device_peak = peak.total() + p.comm_buffers + (s.offload ? 0 : persistent);
  p.host_bytes = s.offload ? persistent : 0;
  p.deferred_init = options.deferred_init;
  p.build_peak = options.deferred_init ? p.sharded_params + kFp32 * largest
                                       : kFp32 * full_elements + p.sharded_params;
  return p;
}

}  // namespace fsdp_plan
