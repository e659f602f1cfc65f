#include "flat_param_group.h"

#include <c10/util/Exception.h>

#include "compat.h"

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

// A parameter whose storage fsdp::defer_init released: shape and dtype only.
bool is_deferred(const at::Tensor& t) {
  return t.numel() > 0 && t.storage().nbytes() == 0;
}

int64_t post_forward_shard_bytes_of(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

at::Tensor free_storage_view(at::Tensor t) {
  compat::resize_storage_bytes(t.storage().unsafeGetStorageImpl(), 0);
  return t;
}

}  // namespace

FlatParamGroup::FlatParamGroup(std::vector<at::Tensor> params, std::vector<std::string> names,
                               UnitGroups groups, FlatParamConfig config,
                               MemoryCounter* gathered_bytes)
    : params_(std::move(params)),
      names_(std::move(names)),
      groups_(std::move(groups)),
      config_(config),
      gathered_bytes_counter_(gathered_bytes) {
  TORCH_INTERNAL_ASSERT(groups_.shard, "a unit needs a shard group");
  TORCH_INTERNAL_ASSERT(groups_.reduce_scatter &&
                            groups_.reduce_scatter->global_ranks() == groups_.shard->global_ranks(),
                        "the reduce-scatter group must hold the shard group's ranks");
  TORCH_INTERNAL_ASSERT(params_.size() == names_.size());
  at::ScalarType dtype = params_.empty() ? at::kFloat : params_[0].scalar_type();
  at::Device device = params_.empty() ? at::Device(at::kCPU) : params_[0].device();
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    TORCH_CHECK(at::isFloatingType(p.scalar_type()), "fsdp: parameter '", names_[i], "' has dtype ",
                p.scalar_type(),
                "; only floating-point parameters can be sharded (register integer state as a "
                "buffer instead)");
    TORCH_CHECK(p.scalar_type() == dtype, "fsdp: parameters of one unit must share a dtype, but '",
                names_[0], "' is ", dtype, " and '", names_[i], "' is ", p.scalar_type(),
                "; cast the module to one dtype before fully_shard, or put them in separate units");
    TORCH_CHECK(p.device() == device, "fsdp: parameters of one unit must be on one device, but '",
                names_[0], "' is on ", device, " and '", names_[i], "' is on ", p.device());
    shapes_.push_back(p.sizes().vec());
    numels.push_back(p.numel());
  }
  const int world = groups_.shard->size();
  layout_ = ShardLayout(numels, world);
  // Offloading keeps the shards in host memory and copies them to the
  // compute device for every gather. On a CPU-only machine the copy is
  // host-to-host, but the code path is the one CUDA runs.
  const bool offload = config_.offload_to_cpu;
  offload_ = offload;
  aliased_ = world == 1 && config_.compute_dtype == dtype && !offload;

  at::NoGradGuard no_grad;
  auto rest_options = at::TensorOptions().dtype(dtype).device(offload ? at::Device(at::kCPU) : device);
  if (offload && config_.pin_memory && device.is_cuda()) rest_options = rest_options.pinned_memory(true);

  if (aliased_) {
    // Nothing to gather: the parameters live as full views of one flat buffer.
    sharded_flat_ = at::zeros({layout_.padded_numel()}, rest_options);
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& slot = layout_.slot(static_cast<int64_t>(i));
      at::Tensor view = sharded_flat_.narrow(0, slot.offset, slot.numel).view(shapes_[i]);
      if (!is_deferred(params_[i])) view.copy_(params_[i].detach());
      sharded_views_.push_back(view);
    }
    point_params_at(sharded_views_);
    return;
  }

  const int rank = groups_.shard->rank();
  sharded_flat_ = at::zeros({layout_.shard_numel()}, rest_options);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto slice = layout_.local_slice(static_cast<int64_t>(i), rank);
    at::Tensor view = sharded_flat_.narrow(0, slice.shard_offset, slice.numel);
    // Deferred parameters (no storage yet) are filled later, by
    // load_full_param(); see [Note: deferred initialization].
    if (!is_deferred(params_[i])) {
      view.copy_(params_[i].detach().reshape(-1).narrow(0, slice.param_begin, slice.numel));
    }
    sharded_views_.push_back(view);
  }
  gathered_flat_ = at::empty({layout_.padded_numel()},
                             at::TensorOptions().dtype(config_.compute_dtype).device(device));
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& slot = layout_.slot(static_cast<int64_t>(i));
    gathered_views_.push_back(gathered_flat_.narrow(0, slot.offset, slot.numel).view(shapes_[i]));
  }
  // Views are made while the storage is allocated (view creation checks
  // bounds); from here on the storage is only resized in place.
  free_storage_view(gathered_flat_);
  point_params_at(sharded_views_);
}

void FlatParamGroup::point_params_at(const std::vector<at::Tensor>& views) {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].set_data(views[i]);
}

// -- parameters -----------------------------------------------------------

void FlatParamGroup::unshard_async() {
  if (aliased_ || state_ != State::kSharded) return;
  compat::resize_storage_bytes(gathered_flat_.storage().unsafeGetStorageImpl(), gathered_bytes());
  gathered_bytes_counter_->add(gathered_bytes());
  if (post_forward_shard_.defined()) {
    // Backward after a post-forward reshard: gather within the k-group.
    all_gather_input_ = std::move(post_forward_shard_);
    post_forward_counter_->sub(post_forward_shard_bytes_of(all_gather_input_));
    post_forward_shard_ = at::Tensor();
    pending_gather_ = post_forward_group_->all_gather(gathered_flat_, all_gather_input_);
    state_ = State::kInFlight;
    return;
  }
  // The shard is cast (mixed precision) and moved (offload) once per gather.
  all_gather_input_ = sharded_flat_.to(gathered_flat_.device(), config_.compute_dtype,
                                       /*non_blocking=*/true, /*copy=*/offload_);
  if (groups_.shard->size() > 1) {
    pending_gather_ = groups_.shard->all_gather(gathered_flat_, all_gather_input_);
  } else {
    gathered_flat_.copy_(all_gather_input_);
  }
  state_ = State::kInFlight;
}

void FlatParamGroup::park_params_on_shards() {
  if (aliased_ || state_ != State::kGathered) return;
  point_params_at(sharded_views_);
  shards_exposed_ = true;
}

double FlatParamGroup::shard_checksum(bool full) const {
  // The sample, every stride-th element, costs one small reduction whatever
  // the unit's size; an optimizer step changes nearly every element.
  constexpr int64_t kSampleElements = 256;
  const int64_t numel = sharded_flat_.numel();
  if (full || numel <= kSampleElements) return sharded_flat_.sum(at::kDouble).item<double>();
  const int64_t stride = numel / kSampleElements;
  return sharded_flat_.as_strided({kSampleElements}, {stride}).sum(at::kDouble).item<double>();
}

void FlatParamGroup::wait_unshard() {
  if (aliased_) return;
  if (state_ == State::kGathered && shards_exposed_) {
    point_params_at(gathered_views_);
    shards_exposed_ = false;
    return;
  }
  if (state_ == State::kSharded) unshard_async();
  if (state_ != State::kInFlight) return;
  if (pending_gather_) {
    WorkPtr work = std::move(pending_gather_);
    work->wait();
  }
  all_gather_input_.reset();
  point_params_at(gathered_views_);
  state_ = State::kGathered;
}

void FlatParamGroup::reshard() {
  discard_post_forward_shard();
  if (aliased_ || state_ == State::kSharded) return;
  if (state_ == State::kInFlight && pending_gather_) {
    // The gather writes into the buffer we are about to free.
    WorkPtr work = std::move(pending_gather_);
    work->wait();
  }
  all_gather_input_.reset();
  point_params_at(sharded_views_);
  shards_exposed_ = false;
  free_storage_view(gathered_flat_);
  gathered_bytes_counter_->sub(gathered_bytes());
  state_ = State::kSharded;
}

// [Note: resharding to a smaller group]
// FSDP2's integer reshard_after_forward (ZeRO++ hpZ). With k ranks per
// post-forward group, after forward each rank keeps chunk j = (shard rank
// mod k) of the gathered buffer: padded_numel / k elements in the compute
// dtype, which are exactly its input to an all-gather over its k-group that
// rebuilds the whole buffer. Backward then gathers within the k-group (e.g.
// inside a node) instead of over the whole shard group, at the cost of
// holding padded_numel / k elements per unit between forward and backward
// (memory_stats' post_forward_shard_bytes). The chunk is dropped once used,
// by any full reshard, and at every root forward (the optimizer may have
// changed the shards since).
void FlatParamGroup::set_post_forward_group(ProcessGroupPtr group, MemoryCounter* kept_bytes) {
  TORCH_INTERNAL_ASSERT(group && kept_bytes);
  TORCH_INTERNAL_ASSERT(layout_.padded_numel() % group->size() == 0);
  post_forward_group_ = std::move(group);
  post_forward_counter_ = kept_bytes;
}

void FlatParamGroup::reshard_after_forward() {
  if (aliased_ || state_ == State::kSharded || !post_forward_group_) {
    reshard();
    return;
  }
  if (state_ == State::kInFlight) wait_unshard();
  const int k = post_forward_group_->size();
  const int64_t chunk = layout_.padded_numel() / k;
  at::NoGradGuard no_grad;
  at::Tensor kept = gathered_flat_.narrow(0, post_forward_group_->rank() * chunk, chunk).clone();
  reshard();  // drops any older chunk first
  post_forward_shard_ = std::move(kept);
  post_forward_counter_->add(post_forward_shard_bytes());
}

void FlatParamGroup::discard_post_forward_shard() {
  if (!post_forward_shard_.defined()) return;
  post_forward_counter_->sub(post_forward_shard_bytes());
  post_forward_shard_ = at::Tensor();
}

// -- gradients ------------------------------------------------------------

void FlatParamGroup::stash_sharded_grads() {
  if (aliased_ || holding_unsharded_grads_ || grads_stashed_) return;
  grads_stashed_ = true;
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
  TORCH_INTERNAL_ASSERT(!pending_reduce_, "a gradient reduction is already in flight");
  const int world = groups_.shard->size();
  const int64_t nparams = layout_.num_params();
  at::NoGradGuard no_grad;
  if (!reduce_input_.defined()) make_reduce_buffers();
  compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(),
                               static_cast<size_t>(reduce_input_.numel() * reduce_input_.element_size()));
  reduce_input_.zero_();
  every_param_used_locally_ = true;
  for (int64_t i = 0; i < nparams; ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    used_flags_[static_cast<size_t>(i)] = grad.defined() ? 1.f : 0.f;
    if (!grad.defined()) {
      every_param_used_locally_ &= !params_[i].requires_grad();
      continue;
    }
    scatter_grad_into(i, grad);
    // The full gradient is no longer needed: aliased parameters get the
    // reduced value written back in place, sharded ones get their shard.
    if (!aliased_) grad = at::Tensor();
  }
  if (nparams > 0) write_used_flags();
  if (world > 1) {
    reduce_output_ = at::empty({reduce_input_.size(1)}, reduce_input_.options());
    pending_reduce_ = groups_.reduce_scatter->reduce_scatter(reduce_output_, reduce_input_.view(-1),
                                                             ReduceOp::kSum);
  } else {
    reduce_output_ = reduce_input_.view(-1);
    if (groups_.replicate) {
      pending_reduce_ = groups_.replicate->all_reduce(reduce_output_, ReduceOp::kSum);
    }
  }
  reduce_started_ = true;
  holding_unsharded_grads_ = false;
}

void FlatParamGroup::finish_grad_reduction() {
  if (!reduce_started_) {
    // Nothing was reduced this step (frozen unit, or no-sync backward keeps
    // accumulating): give back any stashed sharded gradients untouched.
    if (grads_stashed_ && !holding_unsharded_grads_) {
      for (size_t i = 0; i < stashed_grads_.size(); ++i) {
        if (stashed_grads_[i].defined()) params_[i].mutable_grad() = std::move(stashed_grads_[i]);
      }
      stashed_grads_.clear();
      grads_stashed_ = false;
    }
    return;
  }
  reduce_started_ = false;
  const int world = groups_.shard->size();
  if (pending_reduce_) {
    WorkPtr work = std::move(pending_reduce_);
    work->wait();
  }
  int64_t divisor = world;
  if (groups_.replicate) {
    // Hybrid: after the shard group's reduce-scatter, replicas all-reduce.
    if (world > 1) groups_.replicate->all_reduce(reduce_output_, ReduceOp::kSum)->wait();
    divisor *= groups_.replicate->size();
  }
  const int64_t shard = layout_.shard_numel();
  const int64_t nparams = layout_.num_params();
  at::NoGradGuard no_grad;
  at::Tensor reduced = reduce_output_.narrow(0, 0, shard);
  if (divisor > 1) reduced.div_(divisor);
  // Offload: one copy of the reduced shard to the host per unit.
  if (offload_) reduced = reduced.to(sharded_flat_.device(), /*non_blocking=*/false, /*copy=*/true);
  if (!sharded_grad_.defined()) {
    sharded_grad_ = at::zeros_like(sharded_flat_);
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& view = sharded_views_[i];
      sharded_grad_views_.push_back(plain_alias(sharded_grad_, view));
    }
  }
  if (!install_reduced_grads_flat(reduced, every_param_used_locally_)) {
    at::Tensor users = reduce_output_.narrow(0, shard, nparams).to(at::kCPU, at::kFloat);
    ++flag_transfers_;
    install_reduced_grads_per_param(reduced, users.data_ptr<float>());
  }
  stashed_grads_.clear();
  grads_stashed_ = false;
  reduce_output_.reset();
  compat::resize_storage_bytes(reduce_input_.storage().unsafeGetStorageImpl(), 0);
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
  const int rank = shard_rank();
  for (int64_t i = 0; i < layout_.num_params(); ++i) {
    at::Tensor& param = params_[i];
    if (!param.requires_grad()) continue;
    const bool used = user_count[i] > 0.f;
    const auto slice = aliased_ ? ShardLayout::LocalSlice{0, layout_.slot(i).numel,
                                                          layout_.slot(i).offset}
                                : layout_.local_slice(i, rank);
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

// -- introspection --------------------------------------------------------

int64_t FlatParamGroup::gathered_bytes() const {
  if (aliased_) return 0;
  return layout_.padded_numel() * static_cast<int64_t>(c10::elementSize(config_.compute_dtype));
}

int64_t FlatParamGroup::sharded_bytes() const {
  return sharded_flat_.numel() * static_cast<int64_t>(sharded_flat_.element_size());
}

int64_t FlatParamGroup::sharded_grad_bytes() const {
  return sharded_grad_.defined() ? sharded_grad_.numel() * sharded_grad_.element_size() : 0;
}

int64_t FlatParamGroup::post_forward_shard_bytes() const {
  return post_forward_shard_bytes_of(post_forward_shard_);
}

int64_t FlatParamGroup::full_param_bytes() const {
  return layout_.total_numel() * static_cast<int64_t>(sharded_flat_.element_size());
}

}  // namespace fsdp::detail
