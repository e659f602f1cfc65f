// FlatParamGroup, continued: the gradient side. Moving sharded gradients
// aside for backward, reducing the full gradients autograd produced, and
// installing each rank's reduced shard as the parameters' .grad().

#include <c10/util/Exception.h>

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

// Every GradState change goes through here; see [Note: the states of a
// FlatParamGroup] for the table.
void FlatParamGroup::set_grad_state(GradState next) {
  const GradState now = grad_state_;
  bool allowed = false;
  switch (next) {
    case GradState::kSharded: allowed = now == GradState::kReducing || now == GradState::kStashed; break;
    case GradState::kStashed: allowed = now == GradState::kSharded; break;
    case GradState::kUnsynced: allowed = now != GradState::kReducing; break;
    case GradState::kReducing: allowed = now != GradState::kReducing; break;
  }
  TORCH_INTERNAL_ASSERT(allowed, "unit gradients cannot go from ", to_string(now), " to ",
                        to_string(next));
  grad_state_ = next;
}

void FlatParamGroup::keep_unsharded_grads() { set_grad_state(GradState::kUnsynced); }

void FlatParamGroup::stash_sharded_grads() {
  if (aliased_ || grad_state_ != GradState::kSharded) return;
  set_grad_state(GradState::kStashed);
  stashed_grads_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
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
void FlatParamGroup::make_reduce_buffers() {
  const int world = groups_.shard->size();
  const int64_t shard = layout_.shard_numel();
  const int64_t nparams = layout_.num_params();
  const at::Device device = params_.empty() ? at::Device(at::kCPU) : params_[0].device();
  reduce_input_ = at::empty({world, shard + nparams},
                            at::TensorOptions().dtype(config_.reduce_dtype).device(device));
  for (int64_t i = 0; i < nparams; ++i) {
    const auto& slot = layout_.slot(i);
    const int64_t row = slot.offset / shard;
    const bool one_row = slot.numel == 0 || (slot.offset + slot.numel - 1) / shard == row;
    reduce_input_views_.push_back(
        one_row ? reduce_input_[row].narrow(0, slot.offset % shard, slot.numel).view(shapes_[i])
                : at::Tensor());
  }
  reduce_flags_ = reduce_input_.narrow(1, shard, nparams);
  used_flags_.assign(static_cast<size_t>(nparams), 0.f);
  device_flags_ = at::empty({1, nparams}, reduce_input_.options());
  device_flags_rows_ = device_flags_.expand({world, nparams});  // made once: no view per step
  device_flags_values_.clear();  // nothing copied yet
  compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(), 0);
}

void FlatParamGroup::scatter_grad_into(int64_t param, const at::Tensor& grad) const {
  const at::Tensor& destination = reduce_input_views_[static_cast<size_t>(param)];
  if (destination.defined()) {
    destination.copy_(grad);
    return;
  }
  // Each row of the input is what one rank receives; this range straddles rows.
  const auto& slot = layout_.slot(param);
  const int64_t shard = layout_.shard_numel();
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
void FlatParamGroup::write_used_flags() {
  if (used_flags_ != device_flags_values_) {
    device_flags_.copy_(at::from_blob(used_flags_.data(), device_flags_.sizes(), at::kFloat));
    device_flags_values_ = used_flags_;
    ++flag_transfers_;
  }
  reduce_flags_.copy_(device_flags_rows_);
}

void FlatParamGroup::reduce_grads_async() {
  set_grad_state(GradState::kReducing);
  const int world = groups_.shard->size();
  const int64_t nparams = layout_.num_params();
  at::NoGradGuard no_grad;
  if (!reduce_input_.defined()) make_reduce_buffers();
  compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(), reduce_input_.nbytes());
  reduce_input_.zero_();
  PendingReduction& pending = pending_reduce_;
  pending.every_param_used_locally = true;
  for (int64_t i = 0; i < nparams; ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    used_flags_[static_cast<size_t>(i)] = grad.defined() ? 1.f : 0.f;
    if (!grad.defined()) {
      pending.every_param_used_locally &= !params_[i].requires_grad();
      continue;
    }
    scatter_grad_into(i, grad);
    // The full gradient is no longer needed: aliased parameters get the
    // reduced value written back in place, sharded ones get their shard.
    if (!aliased_) grad = at::Tensor();
  }
  if (nparams > 0) write_used_flags();
  if (world > 1) {
    pending.output = at::empty({reduce_input_.size(1)}, reduce_input_.options());
    // The used-parameter flags, each row's last nparams, travel exactly.
    pending.work = compressed_reduce_scatter(*groups_.reduce_scatter, pending.output,
                                             reduce_input_.view(-1), config_.compression.grads(),
                                             /*exact_tail=*/nparams);
  } else {
    pending.output = reduce_input_.view(-1);
    if (groups_.replicate) pending.work = all_reduce_across_replicas(pending.output);
  }
}

void FlatParamGroup::finish_grad_reduction() {
  if (grad_state_ == GradState::kStashed) {
    restore_stashed_grads();  // nothing was reduced this step (a frozen unit)
    return;
  }
  // kSharded: nothing happened; kUnsynced: a no-sync backward keeps
  // accumulating full gradients.
  if (grad_state_ != GradState::kReducing) return;
  const int64_t shard = layout_.shard_numel();
  const int64_t nparams = layout_.num_params();
  at::NoGradGuard no_grad;
  at::Tensor reduced = wait_for_reduced_shard();
  if (!sharded_grad_.defined()) {
    sharded_grad_ = at::zeros_like(sharded_flat_);
    for (size_t i = 0; i < params_.size(); ++i) {
      sharded_grad_views_.push_back(plain_alias(sharded_grad_, sharded_views_[i]));
    }
  }
  if (!install_reduced_grads_flat(reduced, pending_reduce_.every_param_used_locally)) {
    at::Tensor users = pending_reduce_.output.narrow(0, shard, nparams).to(at::kCPU, at::kFloat);
    ++flag_transfers_;
    install_reduced_grads_per_param(reduced, users.data_ptr<float>());
  }
  stashed_grads_.clear();
  pending_reduce_ = PendingReduction();
  compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(), 0);
  set_grad_state(GradState::kSharded);
}

void FlatParamGroup::abandon_grad_step() {
  if (grad_state_ == GradState::kReducing) {
    if (pending_reduce_.work) {
      WorkPtr work = std::move(pending_reduce_.work);
      work->wait();  // the collective writes into buffers about to be freed
    }
    pending_reduce_ = PendingReduction();
    compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(), 0);
  }
  if (grad_state_ != GradState::kReducing && grad_state_ != GradState::kStashed) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (aliased_) break;  // no stash: autograd wrote the gradients in place
    params_[i].mutable_grad() = i < stashed_grads_.size() ? std::move(stashed_grads_[i]) : at::Tensor();
  }
  stashed_grads_.clear();
  set_grad_state(GradState::kSharded);
}

// Gives back the stashed sharded gradients untouched.
void FlatParamGroup::restore_stashed_grads() {
  for (size_t i = 0; i < stashed_grads_.size(); ++i) {
    if (stashed_grads_[i].defined()) params_[i].mutable_grad() = std::move(stashed_grads_[i]);
  }
  stashed_grads_.clear();
  set_grad_state(GradState::kSharded);
}

// Sums `reduced` (the shard and the used-parameter flags after them) across
// the replicas, compressed as the options say; the flags travel exactly.
WorkPtr FlatParamGroup::all_reduce_across_replicas(const at::Tensor& reduced) const {
  return compressed_all_reduce(*groups_.replicate, reduced, config_.compression.replicate_grads(),
                               /*exact_tail=*/layout_.num_params());
}

// Waits for the reduction and returns this rank's averaged shard of it, on
// the shards' device.
at::Tensor FlatParamGroup::wait_for_reduced_shard() {
  const int world = groups_.shard->size();
  if (pending_reduce_.work) {
    WorkPtr work = std::move(pending_reduce_.work);
    work->wait();
  }
  int64_t divisor = world;
  if (groups_.replicate) {
    // Hybrid: after the shard group's reduce-scatter, replicas all-reduce.
    if (world > 1) all_reduce_across_replicas(pending_reduce_.output)->wait();
    divisor *= groups_.replicate->size();
  }
  at::Tensor reduced = pending_reduce_.output.narrow(0, 0, layout_.shard_numel());
  if (divisor > 1) reduced.div_(divisor);
  // Offload: one copy of the reduced shard to the host per unit.
  if (offload_) reduced = reduced.to(sharded_flat_.device(), /*non_blocking=*/false, /*copy=*/true);
  return reduced;
}

// The common cases, with one flat copy or add over the whole shard, once
// every trainable parameter has a gradient: aliased units always (their
// gradients held what autograd accumulated, which the reduction already
// includes, so they are replaced); sharded units when every parameter starts
// from no gradient, or every one accumulates onto the view this unit gave it
// last time. Returns false, having changed nothing, when the step needs the
// per-parameter path.
bool FlatParamGroup::install_reduced_grads_flat(const at::Tensor& reduced, bool every_param_used) {
  if (!every_param_used) return false;
  bool accumulate = false;
  if (!aliased_) {
    bool all_fresh = true;
    bool all_onto_own = true;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].requires_grad()) continue;
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
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].requires_grad()) params_[i].mutable_grad() = sharded_grad_views_[i];
  }
  return true;
}

void FlatParamGroup::install_reduced_grads_per_param(const at::Tensor& reduced, const float* user_count) {
  for (int64_t i = 0; i < layout_.num_params(); ++i) {
    at::Tensor& param = params_[i];
    if (!param.requires_grad()) continue;
    const bool used = user_count[i] > 0.f;
    const auto slice = local_slice(i);
    at::Tensor fresh = reduced.narrow(0, slice.shard_offset, slice.numel).view(sharded_grad_views_[i].sizes());
    at::Tensor& grad = param.mutable_grad();
    if (aliased_) {
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

}  // namespace fsdp::detail
