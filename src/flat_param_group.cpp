#include "flat_param_group.h"

#include <c10/util/Exception.h>

#include "compat.h"

namespace fsdp::detail {
namespace {

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
