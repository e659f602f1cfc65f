// Optimizer state dicts keyed by parameter name: gathered unit by unit and
// field by field (see [Note: full state dict memory] in unit_gather.h),
// taken locally, and loaded back at any world size.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "fsdp/introspection.h"
#include "fsdp/optim_state_dict.h"
#include "state_dict/load_decision.h"
#include "state_dict/optimizer_fields.h"
#include "state_dict/unit_gather.h"

namespace fsdp {
namespace {

// Which fields each parameter (in unit pre-order) has state for on any
// rank, and its step: a rank whose shard of a parameter is empty may have
// no state for it, yet must take part in gathering it.
struct StatePresence {
  std::vector<std::set<std::string>> fields;
  std::vector<int64_t> steps;
};

StatePresence agree_on_presence(ProcessGroup& world, const std::vector<detail::OptimizerFields>& local,
                                const std::vector<bool>& has_state) {
  nlohmann::json mine = nlohmann::json::array();
  for (size_t i = 0; i < local.size(); ++i) {
    nlohmann::json names = nlohmann::json::array();
    if (has_state[i]) {
      for (const auto& f : local[i].tensors) names.push_back(f.first);
    }
    mine.push_back({{"fields", names}, {"step", has_state[i] ? local[i].step : -1}});
  }
  StatePresence presence{std::vector<std::set<std::string>>(local.size()),
                         std::vector<int64_t>(local.size(), -1)};
  for (const auto& text : all_gather_strings(world, mine.dump())) {
    const auto theirs = nlohmann::json::parse(text);
    TORCH_CHECK(theirs.size() == local.size(), "fsdp: full_optim_state_dict: ranks disagree on the "
                "number of parameters (", theirs.size(), " vs ", local.size(), ")");
    for (size_t i = 0; i < local.size(); ++i) {
      for (const auto& name : theirs[i].at("fields")) presence.fields[i].insert(name.get<std::string>());
      presence.steps[i] = std::max(presence.steps[i], theirs[i].at("step").get<int64_t>());
    }
  }
  return presence;
}

}  // namespace

OptimStateDict full_optim_state_dict(const UnitModule& root, const torch::optim::Optimizer& optimizer,
                                     const FullStateDictOptions& options, StateDictStats* stats) {
  detail::RootState& state = detail::idle_root_state(root, "full_optim_state_dict");
  detail::check_supported_optimizer(optimizer, "full_optim_state_dict");
  ProcessGroup& world = state.world();
  const bool keep = !options.rank0_only() || world.rank() == 0;
  detail::GatherAccounting accounting(stats);
  at::NoGradGuard no_grad;

  // This rank's state of every parameter, in unit pre-order.
  std::vector<detail::OptimizerFields> local;
  std::vector<bool> has_state;
  for (const auto& unit : state.units()) {
    for (const auto& param : unit->params().params()) {
      local.emplace_back();
      has_state.push_back(detail::read_optimizer_state(optimizer, param, &local.back()));
    }
  }
  const StatePresence presence = agree_on_presence(world, local, has_state);

  OptimStateDict out;
  size_t first = 0;  // index of the unit's first parameter in `local`
  for (const auto& unit : state.units()) {
    const detail::FlatParamGroup& group = unit->params();
    const auto& layout = group.layout();
    const auto n = static_cast<size_t>(layout.num_params());
    std::set<std::string> unit_fields;
    for (size_t i = first; i < first + n; ++i) unit_fields.insert(presence.fields[i].begin(), presence.fields[i].end());
    if (keep) {
      for (size_t i = first; i < first + n; ++i) {
        if (!presence.fields[i].empty()) out[group.names()[i - first]].step = presence.steps[i];
      }
    }
    for (const auto& field : unit_fields) {
      if (group.is_aliased()) {  // whole tensors already
        if (!keep) continue;
        for (size_t i = first; i < first + n; ++i) {
          auto it = local[i].tensors.find(field);
          if (!has_state[i] || it == local[i].tensors.end()) continue;
          out[group.names()[i - first]].tensors[field] = detail::keep_copy(
              it->second.detach().reshape(group.shapes()[i - first]), options.offload_to_cpu(), accounting);
        }
        continue;
      }
      // This rank's shard of the field, laid out like the unit's flat shard.
      at::Tensor shard = at::zeros({layout.shard_numel()}, group.sharded_flat().options());
      for (size_t i = first; i < first + n; ++i) {
        auto it = local[i].tensors.find(field);
        if (!has_state[i] || it == local[i].tensors.end()) continue;
        const auto slice = layout.local_slice(static_cast<int64_t>(i - first), group.shard_rank());
        if (slice.numel > 0) shard.narrow(0, slice.shard_offset, slice.numel).copy_(it->second.reshape(-1));
      }
      at::Tensor flat = detail::gather_unit_flat(group, shard, accounting);
      shard = at::Tensor();
      if (keep) {
        for (size_t i = first; i < first + n; ++i) {
          if (!presence.fields[i].count(field)) continue;
          const auto& slot = layout.slot(static_cast<int64_t>(i - first));
          out[group.names()[i - first]].tensors[field] = detail::keep_copy(
              flat.narrow(0, slot.offset, slot.numel).view(group.shapes()[i - first]),
              options.offload_to_cpu(), accounting);
        }
      }
      accounting.buffer_freed(static_cast<int64_t>(flat.nbytes()));
      flat = at::Tensor();
    }
    first += n;
  }
  if (keep) {  // ignored parameters: whole state on every rank, no gather
    for (const auto& ignored : state.ignored_params()) {
      detail::OptimizerFields fields;
      if (!detail::read_optimizer_state(optimizer, ignored.param, &fields)) continue;
      ParamOptimState& entry = out[ignored.name];
      entry.step = fields.step;
      for (const auto& f : fields.tensors) {
        entry.tensors[f.first] = detail::keep_copy(f.second.detach().reshape(ignored.param.sizes()),
                                                   options.offload_to_cpu(), accounting);
      }
    }
  }
  return out;
}

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

LoadStateDictResult load_full_optim_state_dict(UnitModule& root, torch::optim::Optimizer& optimizer,
                                               const OptimStateDict& state_dict,
                                               const LoadStateDictOptions& options) {
  detail::RootState& state = detail::idle_root_state(root, "load_full_optim_state_dict");
  detail::check_supported_optimizer(optimizer, "load_full_optim_state_dict");
  ProcessGroup& world = state.world();
  const bool rank0_only = options.rank0_only() && world.size() > 1;
  const auto shards = param_shards(root);

  // The plan, decided by a rank that holds the dict: for each parameter,
  // the fields to load (empty: none) and the step.
  auto make_plan = [&]() {
    detail::LoadDecision decision;
    LoadStateDictResult* result = &decision.problems;
    nlohmann::json& plan = decision.plan;
    std::set<std::string> known;
    for (const auto& shard : shards) {
      known.insert(shard.name);
      nlohmann::json fields = nlohmann::json::array();
      auto it = state_dict.find(shard.name);
      if (it == state_dict.end()) {
        plan.push_back({{"fields", fields}, {"step", -1}});
        continue;
      }
      bool ok = true;
      for (const auto& f : it->second.tensors) {
        if (f.second.sizes().vec() != shard.full_shape) {
          std::ostringstream s;
          s << shard.name << "/" << f.first << ": state dict has " << f.second.sizes()
            << ", model has " << c10::IntArrayRef(shard.full_shape);
          result->mismatched.push_back(s.str());
          ok = false;
        }
      }
      if (ok) {
        for (const auto& f : it->second.tensors) fields.push_back(f.first);
      }
      plan.push_back({{"fields", fields}, {"step", it->second.step}});
    }
    for (const auto& item : state_dict) {
      if (!known.count(item.first)) result->unexpected.push_back(item.first);
    }
    return decision;
  };
  // See [Note: one decision per load] in load_decision.h.
  const detail::LoadDecision decided = detail::agree_on_load(world, "load_full_optim_state_dict", options,
                                                             shards.size(), "parameters", make_plan);

  at::NoGradGuard no_grad;
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& shard = shards[i];
    const auto& entry = decided.plan[i];
    if (entry.at("fields").empty()) continue;
    std::map<std::string, at::Tensor> tensors;
    for (const auto& field_json : entry.at("fields")) {
      const std::string field = field_json.get<std::string>();
      at::Tensor full;
      if (!rank0_only) {
        full = state_dict.at(shard.name).tensors.at(field);
      } else {
        const auto full_options =
            at::TensorOptions().dtype(shard.param.scalar_type()).device(detail::comm_device(world));
        full = world.rank() == 0
                   ? state_dict.at(shard.name).tensors.at(field).to(full_options, false, true).contiguous()
                   : at::empty(shard.full_shape, full_options);
        world.broadcast(full, 0)->wait();
      }
      tensors[field] = full.reshape(-1)
                           .narrow(0, shard.flat_begin, shard.numel)
                           .to(at::TensorOptions().dtype(shard.param.scalar_type()).device(shard.param.device()), false,
                               /*copy=*/true)
                           .view(shard.param.sizes());
    }
    detail::install_optimizer_state(optimizer, shard.param, tensors, entry.at("step").get<int64_t>());
  }
  return decided.problems;
}

}  // namespace fsdp
