// FlatParamGroup, continued: the unit's full parameters outside forward and
// backward, for summon_full_params (see [Note: summon_full_params]) and
// deferred initialization (see [Note: deferred initialization]). These never
// touch the training buffers or the unit's gather state.

#include <c10/util/Exception.h>

#include "flat_param_group.h"

namespace fsdp::detail {

at::Tensor FlatParamGroup::gather_full_flat() const {
  const at::Device device = gathered_flat_.defined() ? gathered_flat_.device() : sharded_flat_.device();
  at::Tensor local = sharded_flat_.to(device);
  if (!plan_.shards_across_ranks) return local.clone();
  at::Tensor full = at::empty({layout_.padded_numel()}, local.options());
  groups_.shard->all_gather(full, local)->wait();
  return full;
}

std::vector<at::Tensor> FlatParamGroup::full_views(const at::Tensor& full_flat) const {
  std::vector<at::Tensor> views;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& slot = layout_.slot(static_cast<int64_t>(i));
    views.push_back(full_flat.narrow(0, slot.offset, slot.numel).view(shapes_[i]));
  }
  return views;
}

void FlatParamGroup::load_full_param(int64_t param, const at::Tensor& full) {
  TORCH_CHECK(full.sizes().vec() == shapes_.at(static_cast<size_t>(param)), "fsdp: parameter '",
              names_[param], "' now has shape ", full.sizes(), " but was sharded with shape ",
              c10::IntArrayRef(shapes_[param]),
              "; full parameters can be edited in place but not reshaped");
  at::NoGradGuard no_grad;
  const auto slice = local_slice(param);
  sharded_views_[param].view(-1).copy_(full.detach().reshape(-1).narrow(0, slice.param_begin, slice.numel));
}

}  // namespace fsdp::detail
