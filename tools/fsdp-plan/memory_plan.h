#pragma once
// One rank's bytes for a model, a setup and (for offload) where they live:
// what libfsdp allocates, term by term (docs/planner.md, "Memory").

#include <string>

#include "fsdp/shard_size.h"
#include "model_spec.h"
#include "training_setup.h"

namespace fsdp_plan {

struct MemoryPlan {
  // Persistent, on the device unless offloaded (then on the host).
  double sharded_params = 0;   // fp32 master shards, padding included
  double sharded_grads = 0;
  double optimizer_state = 0;
  // Scratch the reducing process groups keep from their first reduction on
  // (the ring's receive buffer: one chunk of the largest reduction).
  double comm_buffers = 0;
  // Transient, on the device, at the moment of the peak (peak_phase).
  std::string peak_phase;      // "loss backward" or "backward of <unit>"
  double gathered_params = 0;  // gathered (prefetch and k-group chunks included)
  double reduce_buffers = 0;   // gradient reductions in flight (at most two)
  double unsharded_grads = 0;  // full gradients autograd holds before a reduction
  double activations = 0;      // kept for backward and not yet used
  double head_transient = 0;   // the loss's gradients (loss backward only)
  // What a rank holds at its peak, on the device, and on the host.
  double device_peak = 0;
  double host_bytes = 0;       // offloaded state (0 without offload)
  // Every rank builds the full fp32 model before sharding unless it is built
  // deferred (fsdp::defer_init): fsdp-train does.
  double build_peak = 0;
  bool deferred_init = false;
};

struct PlanOptions {
  bool deferred_init = false;  // the model is built without full parameters
};

MemoryPlan plan_memory(const ModelSpec& model, const TrainingSetup& setup,
                       const PlanOptions& options = {});

// The elements of a unit's shard: the library's own arithmetic (numel
// rounded up to a multiple of the shard group, split evenly; the whole unit
// when nothing is sharded), so the plan pads exactly as training does.
using fsdp::shard_numel;

}  // namespace fsdp_plan
