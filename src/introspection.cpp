#include "fsdp/introspection.h"

#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>

#include <algorithm>

#include "root_state.h"
#include "state_dict/optimizer_fields.h"
#include "unit_module_access.h"
#include "unit_state.h"

namespace fsdp {
namespace {

int64_t bytes(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

}  // namespace

std::vector<ParamShard> param_shards(const UnitModule& root) {
  detail::RootState& state = detail::root_state_of(root, "param_shards");
  std::vector<ParamShard> shards;
  for (const auto& unit : state.units()) {
    const auto& group = unit->params();
    const auto& layout = group.layout();
    for (int64_t i = 0; i < layout.num_params(); ++i) {
      ParamShard shard;
      shard.name = group.names()[i];
      shard.param = group.params()[i];
      shard.full_shape = group.shapes()[i];
      shard.unit = unit->name();
      const auto& replicate = group.groups().replicate;
      shard.primary = !replicate || replicate->rank() == 0;
      const auto slice = group.local_slice(i);
      shard.flat_begin = slice.param_begin;
      shard.numel = slice.numel;
      shards.push_back(std::move(shard));
    }
  }
  const bool rank0 = state.world().rank() == 0;
  for (const auto& ignored : state.ignored_params()) {
    ParamShard shard;
    shard.name = ignored.name;
    shard.param = ignored.param;
    shard.full_shape = ignored.param.sizes().vec();
    shard.numel = ignored.param.numel();
    shard.primary = rank0;
    shard.ignored = true;
    shards.push_back(std::move(shard));
  }
  return shards;
}

std::vector<UnitInfo> unit_infos(const UnitModule& root) {
  std::vector<UnitInfo> infos;
  for (const auto& unit : detail::root_state_of(root, "unit_infos").units()) {
    const auto& group = unit->params();
    UnitInfo info;
    info.name = unit->name();
    info.num_params = group.layout().num_params();
    info.padded_numel = group.layout().padded_numel();
    info.shard_numel = group.layout().shard_numel();
    info.sharded = !group.is_aliased();
    info.compute_dtype = group.config().compute_dtype;
    info.reduce_dtype = group.config().reduce_dtype;
    info.post_forward_group = group.groups().post_forward;
    info.reduce_scatter_group = group.groups().reduce_scatter;
    info.flag_transfers = unit->grads().flag_transfers();
    infos.push_back(std::move(info));
  }
  return infos;
}

MemoryStats memory_stats(const UnitModule& root) {
  detail::RootState& state = detail::root_state_of(root, "memory_stats");
  state.recover_from_failed_step();  // see [Note: recovery after an exception]
  MemoryStats stats;
  for (const auto& unit : state.units()) {
    const auto& group = unit->params();
    const auto group_bytes = group.bytes();
    stats.sharded_param_bytes += group_bytes.sharded;
    stats.sharded_grad_bytes += unit->grads().sharded_grad_bytes();
    stats.unsharded_param_bytes += group_bytes.full_params;
    const int64_t gathered = group.is_aliased() ? group_bytes.sharded : group_bytes.gathered;
    if (unit->config().is_root) {
      stats.root_unit_bytes = gathered;
    } else {
      stats.largest_unit_bytes = std::max(stats.largest_unit_bytes, gathered);
    }
    // Gradients a no-sync backward left unsharded on the parameters.
    if (unit->grads().holds_unsharded_grads()) {
      for (const auto& p : group.params()) stats.sharded_grad_bytes += bytes(p.grad());
    }
  }
  const detail::ModelCounters& counters = *state.counters();
  stats.gathered_param_bytes = counters.gathered_bytes.current();
  stats.peak_gathered_param_bytes = counters.gathered_bytes.peak();
  stats.gathered_units = counters.gathered_bytes.units();
  stats.peak_gathered_units = counters.gathered_bytes.peak_units();
  stats.post_forward_shard_bytes = counters.post_forward_bytes.current();
  stats.peak_post_forward_shard_bytes = counters.post_forward_bytes.peak();
  stats.peak_init_param_bytes = counters.init_bytes.peak();
  stats.grad_reduce_bytes = state.reductions().bytes().current();
  stats.peak_grad_reduce_bytes = state.reductions().bytes().peak();
  stats.peak_grad_reduce_units = state.reductions().bytes().peak_units();
  return stats;
}

void reset_peak_memory_stats(UnitModule& root) {
  detail::RootState& state = detail::root_state_of(root, "reset_peak_memory_stats");
  state.counters()->gathered_bytes.reset_peak();
  state.counters()->post_forward_bytes.reset_peak();
  state.reductions().bytes().reset_peak();
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  detail::check_supported_optimizer(optimizer, "optimizer_state_bytes");
  int64_t total = 0;
  detail::OptimizerFields fields;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      if (!detail::read_optimizer_state(optimizer, param, &fields)) continue;
      for (const auto& field : fields.tensors) total += bytes(field.second);
    }
  }
  return total;
}

}  // namespace fsdp
