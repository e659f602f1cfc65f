#include "flat_param_group.h"

#include <c10/util/Exception.h>

#include "compat.h"
#include "fsdp/deferred_init.h"

namespace fsdp::detail {
namespace {

int64_t bytes_of(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

at::Tensor free_storage_view(at::Tensor t) {
  compat::resize_storage_bytes(t.storage().unsafeGetStorageImpl(), 0);
  return t;
}

}  // namespace

const char* to_string(ParamState state) {
  switch (state) {
    case ParamState::kSharded: return "SHARDED";
    case ParamState::kGathering: return "GATHERING";
    case ParamState::kGathered: return "GATHERED";
    case ParamState::kGatheredParked: return "GATHERED_PARKED";
  }
  return "?";
}

FlatParamGroup::FlatParamGroup(std::vector<at::Tensor> params, std::vector<std::string> names,
                               UnitGroups groups, FlatParamConfig config, UnitPlan plan,
                               std::shared_ptr<ModelCounters> counters)
    : params_(std::move(params)),
      names_(std::move(names)),
      groups_(std::move(groups)),
      config_(config),
      plan_(plan),
      counters_(std::move(counters)) {
  TORCH_INTERNAL_ASSERT(groups_.shard, "a unit needs a shard group");
  TORCH_INTERNAL_ASSERT(groups_.reduce_scatter &&
                            groups_.reduce_scatter->global_ranks() == groups_.shard->global_ranks(),
                        "the reduce-scatter group must hold the shard group's ranks");
  TORCH_INTERNAL_ASSERT(params_.size() == names_.size());
  TORCH_INTERNAL_ASSERT(counters_);
  const at::ScalarType dtype = params_.empty() ? at::kFloat : params_[0].scalar_type();
  const at::Device device = params_.empty() ? at::Device(at::kCPU) : params_[0].device();
  check_params(dtype, device);
  std::vector<int64_t> numels;
  for (const auto& p : params_) {
    shapes_.push_back(p.sizes().vec());
    numels.push_back(p.numel());
  }
  layout_ = ShardLayout(numels, groups_.shard->size(),
                        plan_.keeps_params_whole ? ShardLayout::Placement::kWholeParams
                                                 : ShardLayout::Placement::kEvenSplit);
  TORCH_INTERNAL_ASSERT(!groups_.post_forward ||
                        layout_.padded_numel() % groups_.post_forward->size() == 0);
  // Offloading keeps the shards in host memory and copies them to the
  // compute device for every gather. On a CPU-only machine the copy is
  // host-to-host, but the code path is the one CUDA runs.
  offload_ = config_.offload_to_cpu;
  at::NoGradGuard no_grad;
  if (plan_.aliased) {
    make_aliased_storage(shard_options(dtype, device));
  } else {
    make_sharded_storage(shard_options(dtype, device), device);
  }
  point_params_at(sharded_views_);
}

void FlatParamGroup::check_params(at::ScalarType dtype, at::Device device) {
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
  }
}

// Where the shards rest between uses: host memory when offloading.
at::TensorOptions FlatParamGroup::shard_options(at::ScalarType dtype, at::Device device) const {
  auto options = at::TensorOptions().dtype(dtype).device(offload_ ? at::Device(at::kCPU) : device);
  if (offload_ && config_.pin_memory && device.is_cuda()) options = options.pinned_memory(true);
  return options;
}

// Nothing to gather: the parameters live as full views of one flat buffer.
void FlatParamGroup::make_aliased_storage(const at::TensorOptions& options) {
  sharded_flat_ = at::zeros({layout_.padded_numel()}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& slot = layout_.slot(static_cast<int64_t>(i));
    at::Tensor view =
        sharded_flat_.narrow(0, slot.offset, slot.numel).view(local_shape(static_cast<int64_t>(i)));
    if (!is_deferred(params_[i])) view.copy_(params_[i].detach());
    sharded_views_.push_back(view);
  }
}

// This rank's shard, and the gathered buffer with every parameter's full
// view of it (its storage freed until the first gather).
void FlatParamGroup::make_sharded_storage(const at::TensorOptions& options, at::Device device) {
  const int rank = groups_.shard->rank();
  sharded_flat_ = at::zeros({layout_.shard_numel()}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto slice = layout_.local_slice(static_cast<int64_t>(i), rank);
    at::Tensor view = sharded_flat_.narrow(0, slice.shard_offset, slice.numel)
                          .view(local_shape(static_cast<int64_t>(i)));
    // Deferred parameters (no storage yet) are filled later, by
    // load_full_param(); see [Note: deferred initialization].
    if (!is_deferred(params_[i])) {
      view.view(-1).copy_(
          params_[i].detach().reshape(-1).narrow(0, slice.param_begin, slice.numel));
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
}

ShardLayout::LocalSlice FlatParamGroup::local_slice(int64_t param) const {
  if (!plan_.aliased) return layout_.local_slice(param, groups_.shard->rank());
  const auto& slot = layout_.slot(param);
  return ShardLayout::LocalSlice{0, slot.numel, slot.offset};
}

std::vector<int64_t> FlatParamGroup::local_shape(int64_t param) const {
  const auto slice = local_slice(param);
  const bool full_shaped =
      (plan_.aliased || plan_.keeps_params_whole) && slice.numel == layout_.slot(param).numel;
  return full_shaped ? shapes_.at(static_cast<size_t>(param)) : std::vector<int64_t>{slice.numel};
}

// Every ParamState change goes through here; see [Note: the states of a
// FlatParamGroup] for the table.
void FlatParamGroup::set_param_state(ParamState next) {
  const ParamState now = param_state_;
  bool allowed = false;
  switch (next) {
    case ParamState::kSharded: allowed = true; break;
    case ParamState::kGathering: allowed = now == ParamState::kSharded; break;
    case ParamState::kGathered:
      allowed = now == ParamState::kGathering || now == ParamState::kGatheredParked;
      break;
    case ParamState::kGatheredParked: allowed = now == ParamState::kGathered; break;
  }
  TORCH_INTERNAL_ASSERT(allowed, "unit parameters cannot go from ", to_string(now), " to ",
                        to_string(next));
  param_state_ = next;
}

void FlatParamGroup::point_params_at(const std::vector<at::Tensor>& views) {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].set_data(views[i]);
}

// -- parameters -----------------------------------------------------------

void FlatParamGroup::unshard_async() {
  if (plan_.aliased || param_state_ != ParamState::kSharded) return;
  compat::resize_storage_bytes(gathered_flat_.storage().unsafeGetStorageImpl(), gathered_bytes());
  counters_->gathered_bytes.add(gathered_bytes());
  counters_->live_gathers.add();
  if (post_forward_shard_.defined()) {
    // Backward after a post-forward reshard: gather within the k-group.
    all_gather_input_ = std::move(post_forward_shard_);
    counters_->post_forward_bytes.sub(bytes_of(all_gather_input_));
    post_forward_shard_ = at::Tensor();
    pending_gather_ = compressed_all_gather(*groups_.post_forward, gathered_flat_,
                                            all_gather_input_, config_.compression.weights());
    set_param_state(ParamState::kGathering);
    return;
  }
  const bool compressed = config_.compression.weights().enabled() && plan_.shards_across_ranks;
  // The shard is cast (mixed precision) and moved (offload) once per gather;
  // compressed, it is encoded from the master dtype instead.
  all_gather_input_ = sharded_flat_.to(gathered_flat_.device(),
                                       compressed ? sharded_flat_.scalar_type() : config_.compute_dtype,
                                       /*non_blocking=*/true, /*copy=*/offload_);
  if (plan_.shards_across_ranks) {
    pending_gather_ = compressed_all_gather(*groups_.shard, gathered_flat_, all_gather_input_,
                                            config_.compression.weights());
  } else {
    gathered_flat_.copy_(all_gather_input_);
  }
  set_param_state(ParamState::kGathering);
}

void FlatParamGroup::park_params_on_shards() {
  if (plan_.aliased || param_state_ != ParamState::kGathered) return;
  point_params_at(sharded_views_);
  set_param_state(ParamState::kGatheredParked);
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
  if (plan_.aliased || param_state_ == ParamState::kGathered) return;
  if (param_state_ == ParamState::kGatheredParked) {
    point_params_at(gathered_views_);
    set_param_state(ParamState::kGathered);
    return;
  }
  if (param_state_ == ParamState::kSharded) unshard_async();
  if (pending_gather_) {
    WorkPtr work = std::move(pending_gather_);
    work->wait();
  }
  all_gather_input_.reset();
  point_params_at(gathered_views_);
  set_param_state(ParamState::kGathered);
}

void FlatParamGroup::reshard() {
  discard_post_forward_shard();
  if (plan_.aliased || param_state_ == ParamState::kSharded) return;
  if (param_state_ == ParamState::kGathering && pending_gather_) {
    // The gather writes into the buffer we are about to free.
    WorkPtr work = std::move(pending_gather_);
    work->wait();
  }
  all_gather_input_.reset();
  point_params_at(sharded_views_);
  free_storage_view(gathered_flat_);
  counters_->gathered_bytes.sub(gathered_bytes());
  counters_->live_gathers.sub();
  set_param_state(ParamState::kSharded);
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
void FlatParamGroup::reshard_after_forward() {
  const ProcessGroupPtr& group = groups_.post_forward;
  if (plan_.aliased || param_state_ == ParamState::kSharded || !group) {
    reshard();
    return;
  }
  if (param_state_ == ParamState::kGathering) wait_unshard();
  const int64_t chunk = layout_.padded_numel() / group->size();
  at::NoGradGuard no_grad;
  at::Tensor kept = gathered_flat_.narrow(0, group->rank() * chunk, chunk).clone();
  reshard();  // drops any older chunk first
  post_forward_shard_ = std::move(kept);
  counters_->post_forward_bytes.add(post_forward_shard_bytes());
}

void FlatParamGroup::discard_post_forward_shard() {
  if (!post_forward_shard_.defined()) return;
  counters_->post_forward_bytes.sub(post_forward_shard_bytes());
  post_forward_shard_ = at::Tensor();
}

// -- introspection --------------------------------------------------------

int64_t FlatParamGroup::gathered_bytes() const {
  if (plan_.aliased) return 0;
  return layout_.padded_numel() * static_cast<int64_t>(c10::elementSize(config_.compute_dtype));
}

FlatParamGroup::Bytes FlatParamGroup::bytes() const {
  Bytes bytes;
  bytes.sharded = bytes_of(sharded_flat_);
  bytes.gathered = gathered_bytes();
  bytes.full_params = layout_.total_numel() * static_cast<int64_t>(sharded_flat_.element_size());
  return bytes;
}

int64_t FlatParamGroup::post_forward_shard_bytes() const { return bytes_of(post_forward_shard_); }

}  // namespace fsdp::detail
