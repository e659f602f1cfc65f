#include "unit_state.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include "autograd_hooks.h"
#include "hook_ranges.h"
#include "root_state.h"
#include "unit_name.h"

namespace fsdp::detail {
namespace {

void cast_floating(TensorRefs& tensors, at::ScalarType dtype) {
  for (at::Tensor* t : tensors) {
    if (at::isFloatingType(t->scalar_type()) && t->scalar_type() != dtype) *t = t->to(dtype);
  }
}

}  // namespace

UnitState::UnitState(UnitConfig config, std::unique_ptr<FlatParamGroup> params,
                     std::weak_ptr<RootState> root)
    : config_(std::move(config)),
      params_(std::move(params)),
      grads_(std::make_unique<FlatParamGrads>(*params_)),
      root_(std::move(root)),
      gathered_copy_(*params_) {
  switches_.reshard_after_forward = params_->plan().reshards_after_forward;
}

RootState& UnitState::root() {
  // The root module keeps the state alive; a lock only proves it still does.
  RootState* root = root_.lock().get();
  TORCH_CHECK(root != nullptr, "fsdp: unit '", display_name(config_.name),
              "' was used after the model fully_shard returned was destroyed; keep the model "
              "alive while any of its units is in use");
  return *root;
}

// [Note: a unit's forward on its own]
// Calling a unit directly, outside its root's forward (evaluating an encoder
// on its own, say), works as FSDP2's does: the unit gathers, runs, and frees,
// and with grad on its backward reduces its gradients; the root's final
// callback closes that step as any other. Such a call is not part of the
// recorded execution order (it neither records nor prefetches, forward or
// backward), and every rank must make it, since it gathers.
void UnitState::pre_forward(TensorRefs& inputs) {
  RECORD_USER_SCOPE(kPreForwardRange);  // See [Note: the hooks' profiler ranges]
  RootState& root = this->root();
  const std::string& name = display_name(config_.name);
  const bool on_its_own = !config_.is_root && !root.root_forward_active();
  if (config_.is_root || on_its_own) root.recover_from_failed_step();
  TORCH_CHECK(!root.in_backward(), "fsdp: forward of unit '", name,
              "' was called during backward, which is not supported. Activation checkpointing "
              "of a module that holds units does this: checkpoint the inner units instead "
              "(set_activation_checkpointing(true) on each)");
  TORCH_CHECK(state_ != TrainingState::kSummonFullParams, "fsdp: forward of unit '", name,
              "' was called inside summon_full_params; run forward after the "
              "fsdp::SummonFullParams guard is gone");
  if (gathered_copy_.held()) gathered_copy_.check_held_usable(name);
  TORCH_CHECK(state_ == TrainingState::kIdle, "fsdp: forward of unit '", name,
              "' was called while the unit is in state ", to_string(state_),
              "; a unit cannot run inside its own forward");
  gathered_copy_.drop_kept_if_stale();
  if (config_.is_root) {
    // Chunks kept by an earlier forward's post-forward reshard may be stale
    // (the optimizer steps the shards); see [Note: resharding to a smaller
    // group]. Stale copies kept after backward go now, before prefetching
    // counts them as gathered.
    for (const auto& unit : root.units()) {
      unit->params().discard_post_forward_shard();
      unit->gathered_copy().drop_kept_if_stale();
    }
    root.enter_root_forward();
  } else if (on_its_own && !awaiting_backward()) {
    params_->discard_post_forward_shard();
  }
  ran_on_its_own_ = on_its_own;
  state_ = TrainingState::kForward;
  try {
    root.on_pre_forward(*this);
    params_->wait_unshard();
    if (config_.prefetch && !on_its_own) root.prefetch_after(*this, /*forward=*/true);
    // The post-backward node reduces and reshards; a unit with neither to do
    // (one rank, nothing replicated) lets the final callback close its step.
    if (at::GradMode::is_enabled() && params_->plan().reduces_grads) {
      attach_post_backward_node(inputs, weak_from_this());
    }
    if (config_.cast_inputs_to) cast_floating(inputs, *config_.cast_inputs_to);
  } catch (...) {
    abort_forward_quietly();
    throw;
  }
}

void UnitState::post_forward(TensorRefs& outputs) {
  RECORD_USER_SCOPE(kPostForwardRange);  // See [Note: the hooks' profiler ranges]
  TORCH_INTERNAL_ASSERT(state_ == TrainingState::kForward);
  const bool grad_enabled = at::GradMode::is_enabled();
  if (config_.cast_outputs_to) cast_floating(outputs, *config_.cast_outputs_to);
  bool keep_gathered = false;
  if (grad_enabled) {
    const bool hooked = attach_pre_backward_hooks(outputs, weak_from_this());
    bool any_output_needs_grad = hooked;
    if (hooked) {
      ++pending_backwards_;
      param_versions_ = versions_of(params_->params());
      shard_checksum_ = c10::nullopt;
      checksum_full_ = root().validation().checks_whole_shards();
      if (checksum_full_) {
        shard_checksum_ = params_->shard_checksum(/*full=*/true);
      } else if (!params_->is_aliased() && !params_->sharded_flat().is_cuda()) {
        shard_checksum_ = params_->shard_checksum(/*full=*/false);
      }
    } else {
      // No output we can see needs a gradient, but one might hide in a type
      // we cannot walk; then backward would need the gathered parameters
      // with no pre-backward to gather them. Keep them gathered until the
      // step ends, and let autograd accumulate full-shaped gradients.
      for (const auto& p : params_->params()) any_output_needs_grad |= p.requires_grad();
      if (any_output_needs_grad) {
        keep_gathered = true;
        unhooked_backward_ = true;
        grads_->stash_sharded_grads();
      }
    }
  }
  state_ = TrainingState::kIdle;
  const bool reshard = !grad_enabled || (!keep_gathered && switches_.reshard_after_forward);
  if (reshard) {
    if (grad_enabled) {
      params_->reshard_after_forward();
    } else {
      gathered_copy_.release();
    }
  } else if (!keep_gathered) {
    params_->park_params_on_shards();
  }
  if (config_.is_root) root().exit_root_forward();
}

// [Note: optimizer step before backward]
// Stepping the optimizer between a forward and its backward would make
// backward use parameters that differ from the ones forward used, and for a
// sharded unit silently mix shards of two steps. Two checks catch it.
// In-place edits through the parameters themselves bump their version
// counters, compared on every step. torch::optim writes through p.data(),
// which has a counter of its own, so each unit also compares a sum of its
// local shard taken at post-forward: the whole shard on the first two steps
// (and on every step with FSDP_DEBUG=1), an evenly spaced sample of it on
// other steps of sharded CPU units. CUDA units check only on validated steps,
// since reading the sum back would stall the stream. (With nothing sharded a
// misplaced step behaves as it does without FSDP.) Units that stay gathered
// park their parameters on their shards between forward and backward
// (FlatParamGroup::park_params_on_shards), so such a step reaches these
// checks instead of failing inside the optimizer on mismatched shapes.
void UnitState::check_params_unmodified() const {
  const std::string step_hint =
      " (did optimizer.step() run before backward finished?); step the optimizer only after "
      "loss.backward() returns";
  const auto& params = params_->params();
  for (size_t i = 0; i < param_versions_.size() && i < params.size(); ++i) {
    TORCH_CHECK(static_cast<uint32_t>(params[i]._version()) == param_versions_[i],
                "fsdp: parameter '", params_->names()[i],
                "' was modified in place after forward and before its backward ran", step_hint);
  }
  if (shard_checksum_) {
    TORCH_CHECK(params_->shard_checksum(checksum_full_) == *shard_checksum_,
                "fsdp: the parameters of unit '", display_name(config_.name),
                "' changed after forward and before backward", step_hint);
  }
}

void UnitState::pre_backward() {
  RECORD_USER_SCOPE(kPreBackwardRange);  // See [Note: the hooks' profiler ranges]
  root().on_backward_hook();
  if (state_ == TrainingState::kPreBackward) return;
  TORCH_CHECK(state_ == TrainingState::kIdle, "fsdp: backward reached unit '",
              display_name(config_.name), "' in state ", to_string(state_),
              "; its gradients were already reduced this step (is one of its outputs used after "
              "its inputs' gradients were complete?)");
  check_params_unmodified();
  state_ = TrainingState::kPreBackward;
  params_->wait_unshard();
  if (config_.prefetch && !ran_on_its_own_) root().prefetch_after(*this, /*forward=*/false);
  grads_->stash_sharded_grads();
}

void UnitState::post_backward() {
  RECORD_USER_SCOPE(kPostBackwardRange);  // See [Note: the hooks' profiler ranges]
  root().on_backward_hook();
  if (pending_backwards_ > 0) --pending_backwards_;
  if (pending_backwards_ > 0 || state_ != TrainingState::kPreBackward) return;
  reduce_and_reshard();
}

void UnitState::reduce_and_reshard() {
  bool trainable = false;
  for (const auto& p : params_->params()) trainable |= p.requires_grad();
  // An aliased unit has nothing to scatter, so holding back its all-reduce
  // leaves nothing to do: it keeps full gradients, as without sync. See
  // [Note: holding back the all-reduce].
  const bool reduces_now =
      switches_.requires_grad_sync && !(params_->is_aliased() && grads_->holds_back_all_reduce());
  if (trainable && params_->plan().reduces_grads) {
    if (reduces_now) {
      root().reductions().issue(*grads_);
    } else {
      grads_->keep_unsharded_grads();
    }
  }
  release_params_after_backward();
  state_ = TrainingState::kPostBackward;
}

void UnitState::finish_backward_step() {
  if (state_ == TrainingState::kPreBackward) {
    reduce_and_reshard();
  } else if (state_ == TrainingState::kIdle) {
    if (unhooked_backward_) {
      // Kept gathered for an output we could not hook: reduce what autograd
      // accumulated, exactly as a hooked unit would.
      reduce_and_reshard();
    } else {
      // Forward ran, but backward never reached this unit (its outputs did
      // not feed the loss): just free.
      gathered_copy_.release();
    }
  }
  unhooked_backward_ = false;
  pending_backwards_ = 0;
  ran_on_its_own_ = false;
}

void UnitState::end_backward() {
  grads_->end_backward();
  state_ = TrainingState::kIdle;
}

// [Note: recovery after an exception]
// An exception in the middle of a step (a shape error in one unit, a user's
// check, a failed allocation) must not leave the model stuck with units in
// state forward or backward and parameters gathered; FSDP2 resets its
// iteration state the same way. Forward: a guard in each unit's forward
// frees the unit's gathered parameters as the exception leaves it, and the
// root's guard resets every unit. Backward: the engine drops the final
// callback when backward fails, so nothing runs at that moment; the next
// call that needs a settled model (a root forward, a unit's forward on its
// own, clip_grad_norm_, SummonFullParams, memory_stats) sees a backward that
// began and is no longer running, and resets every unit then. A reset waits
// for the collectives already issued (every rank that failed at the same
// point issued the same ones), frees gathered parameters, and gives back the
// sharded gradients from before the failed backward. When only some ranks
// fail, the others wait in their next collective until the timeout, whose
// error names the operation and the peer.
void UnitState::abort_forward() {
  if (state_ == TrainingState::kForward) state_ = TrainingState::kIdle;
  gathered_copy_.release();  // reshard() waits for a gather in flight first
  if (config_.is_root) root().reset_after_failure();
}

void UnitState::forward_abandoned() noexcept {
  if (pending_backwards_ > 0) --pending_backwards_;
  if (pending_backwards_ > 0 || state_ != TrainingState::kIdle || unhooked_backward_) return;
  const std::shared_ptr<RootState> root = root_.lock();
  if (root && root->in_backward()) return;  // the final callback finishes the step
  try {
    gathered_copy_.release();  // a unit kept gathered for a backward that will not come
  } catch (...) {
    // Only a gather in flight can fail here, and it is not this unit's; the
    // next collective reports the cause.
  }
}

void UnitState::abort_forward_quietly() noexcept {
  try {
    abort_forward();
  } catch (...) {
    // A collective that cannot finish (a peer is gone) while the original
    // exception is on its way: that exception is the one to report.
  }
}

void UnitState::reset_after_failure() {
  gathered_copy_.release();
  grads_->abandon_step();
  if (state_ != TrainingState::kSummonFullParams) state_ = TrainingState::kIdle;
  pending_backwards_ = 0;
  unhooked_backward_ = false;
  ran_on_its_own_ = false;
}

void UnitState::release_params_after_backward() {
  if (switches_.reshard_after_backward || gathered_copy_.held() || params_->is_aliased()) {
    gathered_copy_.release();
  } else {
    gathered_copy_.keep();
  }
}

void UnitState::hold_unsharded() {
  RootState& root = this->root();
  root.recover_from_failed_step();
  const std::string& name = display_name(config_.name);
  TORCH_CHECK(!root.root_forward_active() && !root.in_backward(), "fsdp: unshard() of unit '", name,
              "' was called inside forward or backward; call it between steps");
  TORCH_CHECK(state_ == TrainingState::kIdle, "fsdp: unshard() of unit '", name,
              "' was called while the unit is in state ", to_string(state_),
              "; end the fsdp::SummonFullParams guard first");
  TORCH_CHECK(!awaiting_backward(), "fsdp: unshard() of unit '", name,
              "' was called after a forward whose backward has not run; call backward first, "
              "or run that forward under at::NoGradGuard");
  gathered_copy_.hold();
}

void UnitState::finish_unshard() {
  if (state_ == TrainingState::kIdle) gathered_copy_.finish_hold();
}

void UnitState::end_hold() {
  TORCH_CHECK(state_ == TrainingState::kIdle && !root().root_forward_active(),
              "fsdp: reshard() of unit '", display_name(config_.name),
              "' was called inside forward, backward or summon_full_params; call it between steps");
  gathered_copy_.end();
}

}  // namespace fsdp::detail
