#pragma once
// The runtime side of one unit: the training-state machine and the hooks
// that drive its FlatParamGroup and FlatParamGrads through a step.
//
//   pre_forward    gather the parameters (or wait for a prefetched gather)
//   post_forward   hook the outputs for backward; free the parameters
//   pre_backward   (first output gradient arrives) gather again; stash
//                  sharded gradients
//   post_backward  (gradient reaches the unit's inputs) reduce-scatter the
//                  gradients; free the parameters
//
// A unit's forward may also run on its own, outside the root's forward; see
// [Note: a unit's forward on its own].
//
// The root's final callback finishes whatever a unit could not finish by
// itself (see RootState::on_backward_done).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flat_param_grads.h"
#include "flat_param_group.h"
#include "fsdp/tensor_walk.h"
#include "gathered_copy.h"
#include "training_state.h"

namespace fsdp::detail {

class RootState;

struct UnitConfig {
  std::string name;  // the module path, "" for the root
  bool is_root = false;
  bool prefetch = true;
  c10::optional<at::ScalarType> cast_inputs_to;  // mixed precision
  c10::optional<at::ScalarType> cast_outputs_to;
};

// [Note: a unit outliving its root]
// The root module owns the RootState, and the RootState owns every unit's
// state; a nested module owns a share of its own. A user may keep a nested
// module after dropping the model (an encoder taken out of it, say). Its
// unit then refers to a root that is gone, so it holds the root weakly and
// every use of the root goes through root(), which throws a clear error
// instead of reading freed memory. The counters its storage updates are
// shared with the root (ModelCounters), so freeing the unit's buffers stays
// safe without it.
//
// [Note: runtime switches]
// FSDP2 lets a training loop change, between steps, how each module takes
// part in the next ones: gradient sync (set_requires_gradient_sync),
// the all-reduce across replicas (set_requires_all_reduce), resharding
// after forward and after backward, and how gradients are scaled and handed
// over (set_gradient_divide_factor, set_all_reduce_hook). Each is a fact
// about one unit, so each lives with the unit: what the lifecycle reads on
// UnitState's UnitSwitches, what the reduction reads on its FlatParamGrads'
// GradReductionSettings. UnitModule's setters apply them to a unit and, by
// default, to every unit inside it; fully_shard's options only seed them
// (UnitPlan::reshards_after_forward is the seed of reshard_after_forward).
// A unit whose sync is off keeps full gradients while the others reduce
// theirs: each unit's gradient state is its own.
struct UnitSwitches {
  bool requires_grad_sync = true;
  bool reshard_after_forward = true;
  bool reshard_after_backward = true;  // see [Note: keeping the parameters gathered after backward]
};

class UnitState : public std::enable_shared_from_this<UnitState> {
 public:
  UnitState(UnitConfig config, std::unique_ptr<FlatParamGroup> params,
            std::weak_ptr<RootState> root);

  void pre_forward(TensorRefs& inputs);
  void post_forward(TensorRefs& outputs);
  void pre_backward();
  void post_backward();
  // From the root's final callback: finish this unit's part of the step.
  void finish_backward_step();
  // From the root's final callback, once its GradReductionQueue finished
  // every reduction: this unit's step is over.
  void end_backward();
  // The outputs of one of this unit's forwards died before backward reached
  // them (see [Note: abandoned forwards]). Never throws.
  void forward_abandoned() noexcept;
  // An exception left this unit's forward: free what it gathered, and leave
  // state kForward. See [Note: recovery after an exception].
  void abort_forward();
  // The same, never throwing (an exception is already on its way).
  void abort_forward_quietly() noexcept;
  // An exception ended the step: back to kIdle with parameters and
  // gradients sharded, no collective in flight.
  void reset_after_failure();
  // UnitModule::unshard / UnshardHandle::wait / reshard, checked against
  // the training state; see GatheredCopy.
  void hold_unsharded();
  void finish_unshard();
  void end_hold();

  const std::string& name() const { return config_.name; }
  TrainingState state() const { return state_; }
  // fsdp::SummonFullParams moves idle units in and out of kSummonFullParams.
  void set_summoned(bool on) {
    state_ = on ? TrainingState::kSummonFullParams : TrainingState::kIdle;
  }
  // Forward ran with grad and its backward has not finished yet.
  bool awaiting_backward() const { return pending_backwards_ > 0 || unhooked_backward_; }
  FlatParamGroup& params() { return *params_; }
  FlatParamGrads& grads() { return *grads_; }
  UnitSwitches& switches() { return switches_; }
  GatheredCopy& gathered_copy() { return gathered_copy_; }
  // Throws when the root module is gone; see [Note: a unit outliving its root].
  RootState& root();
  const UnitConfig& config() const { return config_; }

 private:
  void reduce_and_reshard();
  void check_params_unmodified() const;
  void attach_post_backward(TensorRefs& inputs);
  void attach_pre_backward(TensorRefs& outputs);
  // After the unit's backward: free the gathered parameters, or keep them
  // for the next forward (set_reshard_after_backward(false)).
  void release_params_after_backward();

  UnitConfig config_;
  std::unique_ptr<FlatParamGroup> params_;
  std::unique_ptr<FlatParamGrads> grads_;  // the gradients of params_
  std::weak_ptr<RootState> root_;
  TrainingState state_ = TrainingState::kIdle;
  // Forwards run with grad this step whose backward has not reached the
  // unit's inputs yet; the unit reduces when the last one does.
  int pending_backwards_ = 0;
  bool unhooked_backward_ = false;  // kept gathered: outputs could not be hooked
  // This step's forward ran outside the root's forward (the unit was called
  // on its own): its backward prefetches nothing.
  bool ran_on_its_own_ = false;
  std::vector<uint32_t> param_versions_;  // at post-forward, to catch in-place edits
  c10::optional<double> shard_checksum_;  // at post-forward; see [Note: optimizer step before backward]
  bool checksum_full_ = false;            // whole shard or a sample
  UnitSwitches switches_;
  GatheredCopy gathered_copy_;  // of *params_
};

}  // namespace fsdp::detail
