// fsdp::sharded_optim_state_dict and fsdp::load_full_optim_state_dict:
// each rank's optimizer state taken locally, and a full optimizer state dict
// loaded back at any world size.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>

#include <set>
#include <sstream>

#include "fsdp/introspection.h"
#include "fsdp/optim_state_dict.h"
#include "state_dict/load_decision.h"
#include "state_dict/optimizer_fields.h"
#include "state_dict/unit_gather.h"

namespace fsdp {

ShardedOptimStateDict sharded_optim_state_dict(const UnitModule& root,
                                               const torch::optim::Optimizer& optimizer) {
  detail::idle_root_state(root, "sharded_optim_state_dict");
  detail::check_supported_optimizer(optimizer, "sharded_optim_state_dict");
  ShardedOptimStateDict out;
  for (const auto& shard : param_shards(root)) {
    detail::OptimizerFields fields;
    if (!detail::read_optimizer_state(optimizer, shard.param, &fields)) continue;
    ShardedParamOptimState entry{shard.full_shape, shard.flat_begin, shard.primary, {}};
    for (const auto& f : fields.tensors) entry.state.tensors[f.first] = f.second.detach().reshape(-1);
    entry.state.step = fields.step;
    out[shard.name] = std::move(entry);
  }
  return out;
}

namespace {

// One parameter's entry of the load plan: the fields to load (none when the
// dict lacks the parameter, or when any of its shapes differs) and the step.
detail::LoadPlanEntry plan_param(const ParamShard& shard, const OptimStateDict& state_dict,
                                 KeyMismatches* problems) {
  detail::LoadPlanEntry entry;
  auto it = state_dict.find(shard.name);
  if (it == state_dict.end()) return entry;
  bool shapes_match = true;
  for (const auto& f : it->second.tensors) {
    if (f.second.sizes().vec() == shard.full_shape) continue;
    std::ostringstream s;
    s << shard.name << "/" << f.first << ": state dict has " << f.second.sizes() << ", model has "
      << c10::IntArrayRef(shard.full_shape);
    problems->mismatched.push_back(s.str());
    shapes_match = false;
  }
  if (shapes_match) {
    for (const auto& f : it->second.tensors) entry.fields.push_back(f.first);
  }
  entry.load = !entry.fields.empty();
  entry.step = it->second.step;
  return entry;
}

// The plan for every parameter, decided by a rank that holds the dict, and
// the dict's names that are no parameter.
detail::LoadDecision plan_optim_load(const std::vector<ParamShard>& shards,
                                     const OptimStateDict& state_dict) {
  detail::LoadDecision decision;
  std::set<std::string> known;
  for (const auto& shard : shards) {
    known.insert(shard.name);
    decision.plan.push_back(plan_param(shard, state_dict, &decision.problems));
  }
  for (const auto& item : state_dict) {
    if (!known.count(item.first)) decision.problems.unexpected.push_back(item.first);
  }
  return decision;
}

// The whole tensor of one state field: this rank's own dict's, or with
// rank0_only rank 0's, broadcast (collective).
at::Tensor full_field(ProcessGroup& world, bool rank0_only, const ParamShard& shard,
                      const OptimStateDict& state_dict, const std::string& field) {
  if (!rank0_only) return state_dict.at(shard.name).tensors.at(field);
  const auto full_options =
      at::TensorOptions().dtype(shard.param.scalar_type()).device(detail::comm_device(world));
  at::Tensor full =
      world.rank() == 0
          ? state_dict.at(shard.name).tensors.at(field).to(full_options, false, /*copy=*/true).contiguous()
          : at::empty(shard.full_shape, full_options);
  world.broadcast(full, 0)->wait();
  return full;
}

// This rank's run of `full`, as a new tensor shaped, typed and placed like
// the parameter's shard.
at::Tensor local_run(const ParamShard& shard, const at::Tensor& full) {
  const auto options = at::TensorOptions().dtype(shard.param.scalar_type()).device(shard.param.device());
  return full.reshape(-1)
      .narrow(0, shard.flat_begin, shard.numel)
      .to(options, /*non_blocking=*/false, /*copy=*/true)
      .view(shard.param.sizes());
}

}  // namespace

LoadStateDictResult load_full_optim_state_dict(UnitModule& root, torch::optim::Optimizer& optimizer,
                                               const OptimStateDict& state_dict,
                                               const LoadStateDictOptions& options) {
  detail::RootState& state = detail::idle_root_state(root, "load_full_optim_state_dict");
  detail::check_supported_optimizer(optimizer, "load_full_optim_state_dict");
  ProcessGroup& world = state.world();
  const bool rank0_only = options.rank0_only() && world.size() > 1;
  const auto shards = param_shards(root);
  // See [Note: one decision per load] in load_decision.h.
  const detail::LoadDecision decided =
      detail::agree_on_load(world, "load_full_optim_state_dict", options, shards.size(), "parameters",
                            [&] { return plan_optim_load(shards, state_dict); });

  at::NoGradGuard no_grad;
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& shard = shards[i];
    const auto& entry = decided.plan[i];
    if (entry.fields.empty()) continue;
    std::map<std::string, at::Tensor> tensors;
    for (const std::string& field : entry.fields) {
      tensors[field] = local_run(shard, full_field(world, rank0_only, shard, state_dict, field));
    }
    detail::install_optimizer_state(optimizer, shard.param, tensors, entry.step);
  }
  return decided.problems;
}

}  // namespace fsdp
