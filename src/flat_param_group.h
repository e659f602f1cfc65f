#pragma once
// One unit's parameters as a flat sharded buffer: the storage side of FSDP.
// It knows how to unshard (all-gather) and reshard (free); it knows nothing
// about gradients (flat_param_grads.h), hooks or training state
// (unit_state.h).
//
// The user's parameters keep their identity: only their data is swapped with
// set_data() between a view of the local shard (at rest: 1-D, or the full
// shape under [Note: whole-parameter placement]) and a view of the gathered
// flat buffer (in forward and backward). See [Note: flat shard layout] in
// fsdp/shard_layout.h.
//
// Implemented in flat_param_group.cpp (parameters) and flat_param_full.cpp
// (full parameters outside training).

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.h"
#include "fsdp/options.h"
#include "fsdp/shard_layout.h"
#include "model_counters.h"
#include "unit_plan.h"

namespace fsdp::detail {

// The groups a unit communicates over. `shard` holds the ranks the unit is
// sharded across (size 1 when nothing is sharded); `reduce_scatter` holds the
// same ranks and carries the gradient reduce-scatters: `shard` itself, or a
// sibling with its own lane (FullyShardOptions::separate_reduce_scatter_group).
// `replicate`, if set, holds the ranks holding the same shard, across which
// gradients are all-reduced. `post_forward`, if set, holds k consecutive
// ranks of `shard` whose chunk post-forward reshards keep (see [Note:
// resharding to a smaller group]).
struct UnitGroups {
  ProcessGroupPtr shard;
  ProcessGroupPtr reduce_scatter;
  ProcessGroupPtr replicate;     // nullptr: no replication
  ProcessGroupPtr post_forward;  // nullptr: post-forward reshards free all
};

struct FlatParamConfig {
  at::ScalarType compute_dtype;  // dtype of the gathered parameters
  at::ScalarType reduce_dtype;   // dtype gradients are reduced in
  bool offload_to_cpu = false;   // keep shards and sharded grads on the CPU
  bool pin_memory = false;
  CommCompression compression;   // how gathers and reductions travel
};

// [Note: the states of a FlatParamGroup]
// Where the parameters point, and whether the gathered buffer is alive,
// checked on every transition (the gradients' own states are in [Note: the
// gradient states], flat_param_grads.h):
//   kSharded          shards; gathered buffer freed
//   kGathering        shards; all-gather in flight into the gathered buffer
//   kGathered         full views of the gathered buffer
//   kGatheredParked   shards, with the gathered buffer kept alive
//                     (park_params_on_shards; see [Note: optimizer step
//                     before backward] in unit_state.cpp)
//     unshard_async           kSharded -> kGathering
//     wait_unshard            kSharded|kGathering|kGatheredParked -> kGathered
//     park_params_on_shards   kGathered -> kGatheredParked
//     reshard                 any -> kSharded
// Aliased units (is_aliased) never leave kSharded: their parameters are
// always full.
enum class ParamState { kSharded, kGathering, kGathered, kGatheredParked };
const char* to_string(ParamState state);

class FlatParamGroup {
 public:
  // Takes over `params` (same dtype and device, floating point): copies the
  // local shard out of each and points it at its sharded view. Collective-free.
  // `plan` is resolve_unit_options' for these parameters, groups and config.
  // `counters` are the model's: gathered and kept bytes, live gathers.
  FlatParamGroup(std::vector<at::Tensor> params, std::vector<std::string> names, UnitGroups groups,
                 FlatParamConfig config, UnitPlan plan, std::shared_ptr<ModelCounters> counters);

  // -- parameters --------------------------------------------------------
  // Starts gathering the full parameters (no-op if gathered or in flight).
  void unshard_async();
  // Finishes the gather and points every parameter at its full view.
  void wait_unshard();
  // Points every parameter at its shard and frees the gathered storage
  // (and any post-forward shard).
  void reshard();
  // After forward: like reshard(), but with a post-forward group set, first
  // keeps this rank's chunk of the gathered buffer, so the next unshard
  // gathers within that group. See [Note: resharding to a smaller group].
  void reshard_after_forward();
  // Drops the chunk kept by reshard_after_forward() (the shards may change).
  void discard_post_forward_shard();
  // Points every parameter at its shard but keeps the gathered buffer, for
  // units that stay gathered from forward to backward: in between, their
  // parameters look like every other unit's (shards, matching their sharded
  // .grad()), and wait_unshard() points them back without a gather. See
  // [Note: optimizer step before backward] in unit_state.cpp.
  void park_params_on_shards();
  // Sum of the local shard, or of an evenly spaced sample of it: a content
  // check, not a hash.
  double shard_checksum(bool full) const;
  // The gathered buffer is alive or being gathered into (the parameters may
  // be parked on shards).
  bool holds_gathered_buffer() const { return param_state_ != ParamState::kSharded; }
  // True when the parameters never change shape or dtype (nothing sharded,
  // no mixed precision): unshard and reshard are no-ops.
  bool is_aliased() const { return plan_.aliased; }
  // What was decided for this unit; see [Note: a unit's plan].
  const UnitPlan& plan() const { return plan_; }

  // -- full parameters outside training (summon, deferred init) -----------
  // All-gathers the unit in the parameters' own dtype into a new 1-D buffer
  // of padded_numel() elements (collective over the shard group; no copy
  // when nothing is sharded). The caller owns it; the unit is not changed.
  at::Tensor gather_full_flat() const;
  // Full-shaped views of each parameter in such a buffer.
  std::vector<at::Tensor> full_views(const at::Tensor& full_flat) const;
  // Points the parameters at `views` (full-shaped), or back at their shards.
  void expose(const std::vector<at::Tensor>& views) { point_params_at(views); }
  void expose_shards() { point_params_at(sharded_views_); }
  // Copies this rank's slice of `full` (param `param`'s full value) into the
  // local shard.
  void load_full_param(int64_t param, const at::Tensor& full);

  // -- introspection -----------------------------------------------------
  const ShardLayout& layout() const { return layout_; }
  // The part of parameter `param` this rank holds: its local slice of the
  // shard layout, or the whole parameter when nothing is sharded (aliased).
  ShardLayout::LocalSlice local_slice(int64_t param) const;
  // The shape of parameter `param` (and of its sharded .grad()) at rest:
  // its full shape where this rank holds all of it and the unit is aliased
  // or keeps parameters whole, otherwise 1-D.
  std::vector<int64_t> local_shape(int64_t param) const;
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<std::vector<int64_t>>& shapes() const { return shapes_; }
  const UnitGroups& groups() const { return groups_; }
  const FlatParamConfig& config() const { return config_; }
  // 1-D, param dtype, numel = layout().shard_numel()
  const at::Tensor& sharded_flat() const { return sharded_flat_; }
  struct Bytes {
    int64_t sharded = 0;      // the local shard
    int64_t gathered = 0;     // the gathered buffer when alive; 0 when aliased
    int64_t full_params = 0;  // every parameter whole: unpadded, param dtype
  };
  Bytes bytes() const;

 private:
  int64_t gathered_bytes() const;
  int64_t post_forward_shard_bytes() const;  // the kept chunk, 0 when none
  void check_params(at::ScalarType dtype, at::Device device);
  at::TensorOptions shard_options(at::ScalarType dtype, at::Device device) const;
  void make_aliased_storage(const at::TensorOptions& options);
  void make_sharded_storage(const at::TensorOptions& options, at::Device device);
  void set_param_state(ParamState next);
  void point_params_at(const std::vector<at::Tensor>& views);

  std::vector<at::Tensor> params_;  // the user's leaf parameters
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;  // original shapes
  UnitGroups groups_;
  FlatParamConfig config_;
  UnitPlan plan_;
  std::shared_ptr<ModelCounters> counters_;
  ShardLayout layout_;
  bool offload_ = false;  // shards (and, in FlatParamGrads, sharded grads) live in host memory

  at::Tensor sharded_flat_;               // 1-D, param dtype, shard_numel
  std::vector<at::Tensor> sharded_views_;  // per param: 1-D run of sharded_flat_
  at::Tensor gathered_flat_;               // 1-D, compute dtype, padded_numel;
                                           // storage freed while sharded
  std::vector<at::Tensor> gathered_views_;  // per param: full-shaped views
  at::Tensor all_gather_input_;             // the cast shard, alive while in flight
  WorkPtr pending_gather_;
  ParamState param_state_ = ParamState::kSharded;
  at::Tensor post_forward_shard_;  // 1-D, compute dtype, padded_numel / k
};

}  // namespace fsdp::detail
