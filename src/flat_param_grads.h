#pragma once
// One unit's gradients: the gradient side of FSDP, beside the storage of
// flat_param_group.h. It moves sharded gradients aside for backward, reduces
// the full gradients autograd produced (one flat reduce-scatter, then an
// all-reduce across replicas), and installs each rank's reduced shard as the
// parameters' .grad(). Like the storage, it knows nothing about hooks or
// training state (see unit_state.h); GradReductionQueue decides when a
// reduction it started is finished.

#include <ATen/ATen.h>

#include <c10/util/Optional.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "fsdp/comm/process_group.h"

namespace fsdp::detail {

class FlatParamGroup;

// [Note: the gradient states]
// What each parameter's .grad() holds, checked on every transition:
//   kSharded     its sharded gradient (or none)
//   kStashed     this backward's full-shaped gradient; the sharded one aside
//   kUnsynced    full-shaped gradients kept across backwards without
//                gradient sync; any sharded ones still aside
//   kReducing    nothing: the reduction of the full gradients is in
//                flight; any sharded ones still aside
//     stash_sharded_grads     kSharded -> kStashed (kUnsynced stays)
//     keep_unsharded_grads    kSharded|kStashed|kUnsynced -> kUnsynced
//     reduce_grads_async      kSharded|kStashed|kUnsynced -> kReducing
//     finish_reduction        kReducing -> kSharded (reduced shard installed)
//     end_backward            kStashed -> kSharded (nothing was reduced: the
//                             sharded gradients come back); others unchanged
// Aliased units (UnitPlan::aliased) never stash: their gradients are always
// full.
enum class GradState { kSharded, kStashed, kUnsynced, kReducing };
const char* to_string(GradState state);

// How a unit's reduction scales and hands over its result: the user's
// runtime choices (UnitModule::set_gradient_divide_factor,
// set_requires_all_reduce, set_all_reduce_hook). See [Note: runtime
// switches] in unit_state.h.
struct GradReductionSettings {
  // Divides the summed gradient; unset: by the ranks it was summed over.
  c10::optional<double> divide_factor;
  // false: replicas do not all-reduce; the shard group's results are summed
  // aside (see [Note: holding back the all-reduce]).
  bool requires_all_reduce = true;
  // Called on the complete, divided shard, before it is installed.
  std::function<void(const at::Tensor&)> all_reduce_hook;
};

class FlatParamGrads {
 public:
  // The gradients of `group`'s parameters; `group` must outlive this.
  explicit FlatParamGrads(const FlatParamGroup& group);

  // Before the unit's backward: moves sharded gradients aside so autograd
  // can accumulate full-shaped ones. Not done when unsharded gradients from a
  // no-sync backward are still being accumulated.
  void stash_sharded_grads();
  // After a backward without gradient sync, full gradients stay on the
  // parameters and keep accumulating until a synchronizing backward.
  void keep_unsharded_grads();
  // After the unit's backward: starts reducing the full gradients. Called by
  // GradReductionQueue::issue, which alone finishes what this starts.
  void reduce_grads_async();
  // Waits for the reduction and leaves each parameter's .grad() as its
  // sharded gradient (accumulated onto any stashed one). Called only by
  // GradReductionQueue. See [Note: bounded gradient reductions].
  void finish_reduction();
  // The end of a backward, after the queue finished every reduction: gives
  // back sharded gradients stashed for a backward that reduced nothing (a
  // frozen unit).
  void end_backward();
  // After a step that an exception ended (see [Note: recovery after an
  // exception] in unit_state.cpp): waits for a reduction in flight, drops its
  // result, and gives back the sharded gradients stashed before the failed
  // backward, dropping what it accumulated. Full gradients kept without
  // gradient sync, and an aliased unit's own, stay as they are.
  void abandon_step();

  GradReductionSettings& settings() { return settings_; }
  // Whether the next reduction skips the all-reduce across replicas and sums
  // its result aside: requires_all_reduce is off and the unit has replicas.
  bool holds_back_all_reduce() const;

  GradState state() const { return state_; }
  bool holds_unsharded_grads() const { return state_ == GradState::kUnsynced; }
  // Sums of reductions held back from the all-reduce wait for the next one:
  // .grad() lacks them until then.
  bool holds_back_reduced_grads() const { return held_back_output_.defined(); }
  int64_t sharded_grad_bytes() const;
  // Bytes a reduction holds until it is finished: the input (one row per
  // shard rank: its slice plus the used-parameter flags) and, when sharded,
  // the output row, in the reduce dtype.
  int64_t reduce_buffer_bytes() const;
  // Copies of the used-parameter flags to the device and of the counts back,
  // so far: on CUDA each one makes the host wait for the compute stream.
  int64_t flag_transfers() const { return flag_transfers_; }

 private:
  // A gradient reduction in flight.
  struct PendingReduction {
    WorkPtr work;       // null when nothing was communicated
    at::Tensor output;  // [shard_numel + num_params], reduce dtype
    // This rank produced a gradient for every trainable parameter, so no
    // rank-count read-back is needed. See [Note: unused-parameter flags].
    bool every_param_used_locally = false;
  };

  void set_state(GradState next);
  void make_reduce_buffers();
  void make_sharded_grad();
  void write_used_flags();
  void scatter_grad_into(int64_t param, const at::Tensor& grad) const;
  void start_collective();
  at::Tensor wait_for_reduced_shard();
  void hold_back_reduced_output();
  void add_held_back_output();
  WorkPtr all_reduce_across_replicas(const at::Tensor& reduced) const;
  bool install_reduced_grads_flat(const at::Tensor& reduced, bool every_param_used);
  void install_reduced_grads_per_param(const at::Tensor& reduced, const float* user_count);
  void free_reduce_input();

  const FlatParamGroup& group_;  // the storage these gradients belong to
  GradState state_ = GradState::kSharded;
  at::Tensor sharded_grad_;                     // 1-D, param dtype, shard_numel
  std::vector<at::Tensor> sharded_grad_views_;  // per param, shaped like its sharded view
  std::vector<at::Tensor> stashed_grads_;       // per param, while stashed
  // See [Note: gradient reduction without per-parameter work]. Made at the
  // first reduction; the input's storage is freed between reductions.
  at::Tensor reduce_input_;                     // [world, shard_numel + num_params], reduce dtype
  std::vector<at::Tensor> reduce_input_views_;  // per param: its full-shaped
                                                // destination, or undefined
                                                // when it spans two rows
  at::Tensor reduce_flags_;                     // [world, num_params] of reduce_input_
  std::vector<float> used_flags_;               // this rank's flags, [num_params]
  // See [Note: unused-parameter flags]: the flags last copied to the device,
  // as [1, num_params] on the device (and seen as [world, num_params]) and as
  // the host values they hold.
  at::Tensor device_flags_;
  at::Tensor device_flags_rows_;
  std::vector<float> device_flags_values_;
  int64_t flag_transfers_ = 0;
  PendingReduction pending_;  // meaningful in GradState::kReducing
  GradReductionSettings settings_;
  // Sums of reductions not yet all-reduced across replicas, shaped like
  // pending_.output (the used-parameter counts summed too); undefined when
  // none. See [Note: holding back the all-reduce].
  at::Tensor held_back_output_;  // [shard_numel + num_params], reduce dtype
};

}  // namespace fsdp::detail
