#include "flat_param_grads.h"

#include <c10/util/Exception.h>

#include <utility>

#include "compat.h"
#include "flat_param_group.h"

namespace fsdp::detail {
namespace {

// A tensor sharing `like`'s geometry on `base`'s storage that autograd does
// not see as a view. Gradients must be such tensors: optimizers call
// grad.detach_(), which views refuse.
at::Tensor plain_alias(const at::Tensor& base, const at::Tensor& like) {
  at::Tensor alias = at::empty({0}, base.options());
  alias.set_(base.storage(), like.storage_offset(), like.sizes(), like.strides());
  return alias;
}

}  // namespace

const char* to_string(GradState state) {
  switch (state) {
    case GradState::kSharded: return "SHARDED";
    case GradState::kStashed: return "STASHED";
    case GradState::kUnsynced: return "UNSYNCED";
    case GradState::kReducing: return "REDUCING";
  }
  return "?";
}

FlatParamGrads::FlatParamGrads(const FlatParamGroup& group) : group_(group) {}

// Every GradState change goes through here; see [Note: the gradient states]
// for the table.
void FlatParamGrads::set_state(GradState next) {
  const GradState now = state_;
  bool allowed = false;
  switch (next) {
    case GradState::kSharded: allowed = now == GradState::kReducing || now == GradState::kStashed; break;
    case GradState::kStashed: allowed = now == GradState::kSharded; break;
    case GradState::kUnsynced: allowed = now != GradState::kReducing; break;
    case GradState::kReducing: allowed = now != GradState::kReducing; break;
  }
  TORCH_INTERNAL_ASSERT(allowed, "unit gradients cannot go from ", to_string(now), " to ",
                        to_string(next));
  state_ = next;
}

void FlatParamGrads::keep_unsharded_grads() { set_state(GradState::kUnsynced); }

void FlatParamGrads::stash_sharded_grads() {
  if (group_.is_aliased() || state_ != GradState::kSharded) return;
  set_state(GradState::kStashed);
  const auto& params = group_.params();
  stashed_grads_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor& grad = params[i].mutable_grad();
    stashed_grads_[i] = std::move(grad);
    grad = at::Tensor();
  }
}

// [Note: gradient reduction without per-parameter work]
// Each step a unit's reduction copies every full gradient into one flat
// input and every reduced shard back out. Everything those copies need is
// made once, at the unit's first reduction: the input buffer (its storage
// freed between reductions, like the gathered parameters), each parameter's
// full-shaped destination in it, and the flags' rows. So a step allocates no
// tensor per parameter: one copy per parameter in, one flat copy or add out
// (install_reduced_grads_flat), and the per-parameter path only when this
// rank left a parameter without a gradient, the user replaced a gradient, or
// some parameters accumulate and others do not.
// A parameter whose range spans two rows of the input (at most world - 1 of
// them per unit) is copied piece by piece.
void FlatParamGrads::make_reduce_buffers() {
  const ShardLayout& layout = group_.layout();
  const int world = group_.groups().shard->size();
  const int64_t shard = layout.shard_numel();
  const int64_t nparams = layout.num_params();
  const auto& params = group_.params();
  const at::Device device = params.empty() ? at::Device(at::kCPU) : params[0].device();
  reduce_input_ = at::empty({world, shard + nparams},
                            at::TensorOptions().dtype(group_.config().reduce_dtype).device(device));
  for (int64_t i = 0; i < nparams; ++i) {
    const auto& slot = layout.slot(i);
    const int64_t row = slot.offset / shard;
    const bool one_row = slot.numel == 0 || (slot.offset + slot.numel - 1) / shard == row;
    reduce_input_views_.push_back(
        one_row
            ? reduce_input_[row].narrow(0, slot.offset % shard, slot.numel).view(group_.shapes()[i])
            : at::Tensor());
  }
  reduce_flags_ = reduce_input_.narrow(1, shard, nparams);
  used_flags_.assign(static_cast<size_t>(nparams), 0.f);
  device_flags_ = at::empty({1, nparams}, reduce_input_.options());
  device_flags_rows_ = device_flags_.expand({world, nparams});  // made once: no view per step
  device_flags_values_.clear();  // nothing copied yet
  free_reduce_input();
}

void FlatParamGrads::free_reduce_input() {
  compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(), 0);
}

// The sharded gradients, made at the first finished reduction: one flat
// buffer shaped like the local shard, and per parameter a plain alias with
// the geometry of its sharded view.
void FlatParamGrads::make_sharded_grad() {
  sharded_grad_ = at::zeros_like(group_.sharded_flat());
  for (int64_t i = 0; i < group_.layout().num_params(); ++i) {
    const auto slice = group_.local_slice(i);
    at::Tensor view =
        sharded_grad_.narrow(0, slice.shard_offset, slice.numel).view(group_.local_shape(i));
    sharded_grad_views_.push_back(plain_alias(sharded_grad_, view));
  }
}

void FlatParamGrads::scatter_grad_into(int64_t param, const at::Tensor& grad) const {
  const at::Tensor& destination = reduce_input_views_[static_cast<size_t>(param)];
  if (destination.defined()) {
    destination.copy_(grad);
    return;
  }
  // Each row of the input is what one rank receives; this range straddles rows.
  const auto& slot = group_.layout().slot(param);
  const int64_t shard = group_.layout().shard_numel();
  at::Tensor flat = grad.reshape(-1);
  int64_t pos = slot.offset;
  int64_t src = 0;
  while (src < slot.numel) {
    const int64_t row = pos / shard;
    const int64_t col = pos % shard;
    const int64_t len = std::min(shard - col, slot.numel - src);
    reduce_input_[row].narrow(0, col, len).copy_(flat.narrow(0, src, len));
    pos += len;
    src += len;
  }
}

// [Note: unused-parameter flags]
// A parameter that no rank used in a step has no gradient in the reference
// run, and optimizers such as AdamW skip it entirely. A zero gradient would
// not be the same (weight decay would still apply). So every reduction
// carries one extra element per parameter: 1 where this rank produced a
// gradient. After reduction each rank knows how many ranks used the
// parameter, and leaves .grad() undefined when none did, like the reference.
// A rank that used every parameter itself knows the answer without reading
// the counts back (on CUDA, a host synchronization).
// Getting the flags onto the device is a host-to-device copy, which on CUDA
// waits for the compute stream. So the flags stay on the device and are
// copied again only when they change: never for a unit whose parameters are
// all used, or whose frozen ones stay frozen.
void FlatParamGrads::write_used_flags() {
  if (used_flags_ != device_flags_values_) {
    device_flags_.copy_(at::from_blob(used_flags_.data(), device_flags_.sizes(), at::kFloat));
    device_flags_values_ = used_flags_;
    ++flag_transfers_;
  }
  reduce_flags_.copy_(device_flags_rows_);
}

void FlatParamGrads::reduce_grads_async() {
  set_state(GradState::kReducing);
  const auto& params = group_.params();
  const int64_t nparams = group_.layout().num_params();
  at::NoGradGuard no_grad;
  if (!reduce_input_.defined()) make_reduce_buffers();
  compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(), reduce_input_.nbytes());
  reduce_input_.zero_();
  pending_.every_param_used_locally = true;
  for (int64_t i = 0; i < nparams; ++i) {
    at::Tensor& grad = params[i].mutable_grad();
    used_flags_[static_cast<size_t>(i)] = grad.defined() ? 1.f : 0.f;
    if (!grad.defined()) {
      pending_.every_param_used_locally &= !params[i].requires_grad();
      continue;
    }
    scatter_grad_into(i, grad);
    // The full gradient is no longer needed: aliased parameters get the
    // reduced value written back in place, sharded ones get their shard.
    if (!group_.is_aliased()) grad = at::Tensor();
  }
  if (nparams > 0) write_used_flags();
  start_collective();
}

// Issues the reduction of the filled input. With one rank in the shard
// group there is nothing to scatter: the input is the output, and only
// replicas (if any) all-reduce it.
void FlatParamGrads::start_collective() {
  const UnitGroups& groups = group_.groups();
  const int64_t nparams = group_.layout().num_params();
  if (group_.plan().shards_across_ranks) {
    pending_.output = at::empty({reduce_input_.size(1)}, reduce_input_.options());
    // The used-parameter flags, each row's last nparams, travel exactly.
    pending_.work =
        compressed_reduce_scatter(*groups.reduce_scatter, pending_.output, reduce_input_.view(-1),
                                  group_.config().compression.grads(),
                                  /*exact_tail=*/nparams);
  } else {
    pending_.output = reduce_input_.view(-1);
    if (group_.plan().replicates && !holds_back_all_reduce()) {
      add_held_back_output();
      pending_.work = all_reduce_across_replicas(pending_.output);
    }
  }
}

bool FlatParamGrads::holds_back_all_reduce() const {
  return !settings_.requires_all_reduce && group_.plan().replicates;
}

// [Note: holding back the all-reduce]
// FSDP2's set_requires_all_reduce(false). With hybrid sharding, gradient
// accumulation can reduce-scatter every micro-batch (each rank then holds
// only a shard of the gradients) and all-reduce across replicas, the slow
// inter-node hop, only once. Such a reduction adds its output, undivided
// and with the used-parameter counts, into held_back_output_, and gives back
// the sharded gradients stashed before it: .grad() does not hold this
// micro-batch yet. The next reduction that all-reduces first adds the held
// sums to its own output, so one all-reduce carries every micro-batch, and
// the division, the hook and the install happen once, on the total. Aliased
// units have nothing to scatter: for them the switch means no reduction at
// all, and UnitState keeps their full gradients as without gradient sync.
void FlatParamGrads::hold_back_reduced_output() {
  if (held_back_output_.defined()) {
    held_back_output_.add_(pending_.output);
  } else {
    held_back_output_ = pending_.output.clone();  // the output may alias the freed input
  }
  const auto& params = group_.params();
  for (size_t i = 0; i < stashed_grads_.size(); ++i)
    params[i].mutable_grad() = std::move(stashed_grads_[i]);
}

void FlatParamGrads::add_held_back_output() {
  if (!held_back_output_.defined()) return;
  pending_.output.add_(held_back_output_);
  held_back_output_ = at::Tensor();
}

void FlatParamGrads::finish_reduction() {
  TORCH_INTERNAL_ASSERT(state_ == GradState::kReducing,
                        "no gradient reduction to finish; the state is ", to_string(state_));
  const int64_t shard = group_.layout().shard_numel();
  const int64_t nparams = group_.layout().num_params();
  at::NoGradGuard no_grad;
  if (holds_back_all_reduce()) {
    if (pending_.work) std::exchange(pending_.work, nullptr)->wait();
    hold_back_reduced_output();
  } else {
    at::Tensor reduced = wait_for_reduced_shard();
    if (!sharded_grad_.defined()) make_sharded_grad();
    if (!install_reduced_grads_flat(reduced, pending_.every_param_used_locally)) {
      at::Tensor users = pending_.output.narrow(0, shard, nparams).to(at::kCPU, at::kFloat);
      ++flag_transfers_;
      install_reduced_grads_per_param(reduced, users.data_ptr<float>());
    }
  }
  stashed_grads_.clear();
  pending_ = PendingReduction();
  free_reduce_input();
  set_state(GradState::kSharded);
}

void FlatParamGrads::end_backward() {
  // Only GradReductionQueue finishes reductions, before this runs.
  TORCH_INTERNAL_ASSERT(state_ != GradState::kReducing, "a gradient reduction is still in flight");
  // kSharded: nothing happened; kUnsynced: a no-sync backward keeps
  // accumulating full gradients.
  if (state_ != GradState::kStashed) return;
  // Nothing was reduced this step (a frozen unit): the stash comes back untouched.
  const auto& params = group_.params();
  for (size_t i = 0; i < stashed_grads_.size(); ++i) {
    if (stashed_grads_[i].defined()) params[i].mutable_grad() = std::move(stashed_grads_[i]);
  }
  stashed_grads_.clear();
  set_state(GradState::kSharded);
}

void FlatParamGrads::abandon_step() {
  if (state_ == GradState::kReducing) {
    if (pending_.work) {
      WorkPtr work = std::move(pending_.work);
      work->wait();  // the collective writes into buffers about to be freed
    }
    pending_ = PendingReduction();
    free_reduce_input();
  }
  if (state_ != GradState::kReducing && state_ != GradState::kStashed) return;
  const auto& params = group_.params();
  // Aliased units have no stash: autograd wrote the gradients in place.
  for (size_t i = 0; i < params.size() && !group_.is_aliased(); ++i) {
    params[i].mutable_grad() =
        i < stashed_grads_.size() ? std::move(stashed_grads_[i]) : at::Tensor();
  }
  stashed_grads_.clear();
  set_state(GradState::kSharded);
}

// Sums `reduced` (the shard and the used-parameter flags after them) across
// the replicas, compressed as the options say; the flags travel exactly.
WorkPtr FlatParamGrads::all_reduce_across_replicas(const at::Tensor& reduced) const {
  return compressed_all_reduce(*group_.groups().replicate, reduced,
                               group_.config().compression.replicate_grads(),
                               /*exact_tail=*/group_.layout().num_params());
}

// Waits for the reduction and returns this rank's shard of it, divided (by
// the ranks it was summed over, or the user's factor) and passed through the
// user's all-reduce hook, on the shards' device.
at::Tensor FlatParamGrads::wait_for_reduced_shard() {
  const UnitPlan& plan = group_.plan();
  if (pending_.work) {
    WorkPtr work = std::move(pending_.work);
    work->wait();
  }
  int64_t ranks_summed = group_.groups().shard->size();
  if (plan.replicates) {
    // Hybrid: after the shard group's reduce-scatter, replicas all-reduce.
    if (plan.shards_across_ranks) {
      add_held_back_output();
      all_reduce_across_replicas(pending_.output)->wait();
    }
    ranks_summed *= group_.groups().replicate->size();
  }
  at::Tensor reduced = pending_.output.narrow(0, 0, group_.layout().shard_numel());
  const double divisor = settings_.divide_factor.value_or(static_cast<double>(ranks_summed));
  if (divisor != 1.0) reduced.div_(divisor);
  if (settings_.all_reduce_hook) settings_.all_reduce_hook(reduced);
  // Offload: one copy of the reduced shard to the host per unit.
  const at::Tensor& shard = group_.sharded_flat();
  if (group_.config().offload_to_cpu) {
    reduced = reduced.to(shard.device(), /*non_blocking=*/false, /*copy=*/true);
  }
  return reduced;
}

// The common cases, with one flat copy or add over the whole shard, once
// every trainable parameter has a gradient: aliased units always (their
// gradients held what autograd accumulated, which the reduction already
// includes, so they are replaced); sharded units when every parameter starts
// from no gradient, or every one accumulates onto the view this unit gave it
// last time. Returns false, having changed nothing, when the step needs the
// per-parameter path.
bool FlatParamGrads::install_reduced_grads_flat(const at::Tensor& reduced, bool every_param_used) {
  if (!every_param_used) return false;
  const auto& params = group_.params();
  bool accumulate = false;
  if (!group_.is_aliased()) {
    bool all_fresh = true;
    bool all_onto_own = true;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].requires_grad()) continue;
      // Pointer compares only: no tensor is copied per parameter here.
      const c10::TensorImpl* previous =
          stashed_grads_.empty() || !stashed_grads_[i].defined() ? nullptr
                                                                 : stashed_grads_[i].unsafeGetTensorImpl();
      all_fresh &= previous == nullptr;
      all_onto_own &= previous == sharded_grad_views_[i].unsafeGetTensorImpl();
    }
    if (!all_fresh && !all_onto_own) return false;
    accumulate = !all_fresh;
  }
  // Frozen parameters' ranges hold zeros in `reduced`; no gradient points there.
  if (accumulate) {
    sharded_grad_.add_(reduced);
  } else {
    sharded_grad_.copy_(reduced);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].requires_grad()) params[i].mutable_grad() = sharded_grad_views_[i];
  }
  return true;
}

void FlatParamGrads::install_reduced_grads_per_param(const at::Tensor& reduced,
                                                     const float* user_count) {
  const auto& params = group_.params();
  for (int64_t i = 0; i < group_.layout().num_params(); ++i) {
    const at::Tensor& param = params[i];
    if (!param.requires_grad()) continue;
    const bool used = user_count[i] > 0.f;
    const auto slice = group_.local_slice(i);
    at::Tensor fresh = reduced.narrow(0, slice.shard_offset, slice.numel).view(sharded_grad_views_[i].sizes());
    at::Tensor& grad = param.mutable_grad();
    if (group_.is_aliased()) {
      // The parameter's gradient already held everything accumulated so far
      // (identical on every rank before this backward), so the average of
      // the sums is the old value plus the average of the new parts.
      if (!used) continue;
      sharded_grad_views_[i].copy_(fresh);
      grad = sharded_grad_views_[i];
      continue;
    }
    at::Tensor stashed = stashed_grads_.empty() ? at::Tensor() : std::move(stashed_grads_[i]);
    if (stashed.defined()) {
      stashed.add_(fresh);
      grad = std::move(stashed);
    } else if (used) {
      sharded_grad_views_[i].copy_(fresh);
      grad = sharded_grad_views_[i];
    } else {
      grad = at::Tensor();
    }
  }
}

int64_t FlatParamGrads::sharded_grad_bytes() const {
  const auto bytes = [](const at::Tensor& t) {
    return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  };
  return bytes(sharded_grad_) + bytes(held_back_output_);
}

int64_t FlatParamGrads::reduce_buffer_bytes() const {
  const int64_t world = group_.groups().shard->size();
  const int64_t row = group_.layout().shard_numel() + group_.layout().num_params();
  const int64_t rows = group_.plan().shards_across_ranks ? world + 1 : 1;
  return rows * row * static_cast<int64_t>(c10::elementSize(group_.config().reduce_dtype));
}

}  // namespace fsdp::detail
