// fsdp::full_optim_state_dict: every parameter's optimizer state by name,
// gathered unit by unit and field by field. See [Note: full state dict
// memory] in unit_gather.h.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <set>

#include "fsdp/optim_state_dict.h"
#include "state_dict/optimizer_fields.h"
#include "json/json_io.h"
#include "state_dict/unit_gather.h"

namespace fsdp {
namespace {

size_t num_params(const detail::FlatParamGroup& group) {
  return static_cast<size_t>(group.layout().num_params());
}

// This rank's state of every parameter of every unit, in unit pre-order.
struct LocalStates {
  std::vector<detail::OptimizerFields> fields;
  std::vector<bool> has_state;  // false: the optimizer has no state for it here

  // The state tensor `field` of parameter `i`, or nullptr.
  const at::Tensor* find(size_t i, const std::string& field) const {
    if (!has_state[i]) return nullptr;
    auto it = fields[i].tensors.find(field);
    return it == fields[i].tensors.end() ? nullptr : &it->second;
  }
};

LocalStates read_local_states(const detail::RootState& state, const torch::optim::Optimizer& optimizer) {
  LocalStates local;
  for (const auto& unit : state.units()) {
    for (const auto& param : unit->params().params()) {
      local.fields.emplace_back();
      local.has_state.push_back(detail::read_optimizer_state(optimizer, param, &local.fields.back()));
    }
  }
  return local;
}

// Which fields each parameter (in unit pre-order) has state for on any
// rank, and its step: a rank whose shard of a parameter is empty may have
// no state for it, yet must take part in gathering it.
struct StatePresence {
  std::vector<std::set<std::string>> fields;
  std::vector<int64_t> steps;
};

StatePresence agree_on_presence(ProcessGroup& world, const LocalStates& local) {
  const size_t count = local.fields.size();
  json::Writer mine;
  mine.begin_array();
  for (size_t i = 0; i < count; ++i) {
    std::vector<std::string> names;
    if (local.has_state[i]) {
      for (const auto& f : local.fields[i].tensors) names.push_back(f.first);
    }
    mine.begin_object().key("fields").array(names);
    mine.member("step", local.has_state[i] ? local.fields[i].step : int64_t{-1}).end_object();
  }
  mine.end_array();
  StatePresence presence{std::vector<std::set<std::string>>(count), std::vector<int64_t>(count, -1)};
  const std::string source = "the optimizer state presence sent by a rank (internal error)";
  for (const auto& text : all_gather_strings(world, mine.text())) {
    const json::Document theirs = json::parse(text, source);
    TORCH_CHECK(theirs.IsArray() && theirs.Size() == count, "fsdp: full_optim_state_dict: ranks disagree on the "
                "number of parameters (", theirs.IsArray() ? theirs.Size() : 0, " vs ", count, ")");
    for (rapidjson::SizeType i = 0; i < theirs.Size(); ++i) {
      for (const auto& name : json::string_array_field(theirs[i], "fields", source)) presence.fields[i].insert(name);
      presence.steps[i] = std::max(presence.steps[i], json::int64_field(theirs[i], "step", source));
    }
  }
  return presence;
}

// Builds a full optimizer state dict one unit and one field at a time.
class FullOptimStateBuilder {
 public:
  // `keep`: this rank returns the dict.
  FullOptimStateBuilder(const FullStateDictOptions& options, bool keep, StateDictStats* stats,
                        LocalStates local, StatePresence presence)
      : options_(options),
        keep_(keep),
        accounting_(stats),
        local_(std::move(local)),
        presence_(std::move(presence)) {}

  // Collective over the unit's shard group (unless it is not sharded).
  // `first`: the position of the unit's first parameter in unit pre-order.
  void add_unit(const detail::FlatParamGroup& group, size_t first) {
    const size_t n = num_params(group);
    if (keep_) {
      for (size_t i = first; i < first + n; ++i) {
        if (!presence_.fields[i].empty()) out_[group.names()[i - first]].step = presence_.steps[i];
      }
    }
    std::set<std::string> unit_fields;
    for (size_t i = first; i < first + n; ++i) {
      unit_fields.insert(presence_.fields[i].begin(), presence_.fields[i].end());
    }
    for (const auto& field : unit_fields) {
      if (group.is_aliased()) {
        copy_whole_field(group, first, field);
      } else {
        gather_field(group, first, field);
      }
    }
  }

  // Ignored parameters: whole state on every rank, no gather.
  void add_ignored_params(const detail::RootState& state, const torch::optim::Optimizer& optimizer) {
    if (!keep_) return;
    for (const auto& ignored : state.ignored_params()) {
      detail::OptimizerFields fields;
      if (!detail::read_optimizer_state(optimizer, ignored.param, &fields)) continue;
      ParamOptimState& entry = out_[ignored.name];
      entry.step = fields.step;
      for (const auto& f : fields.tensors) {
        entry.tensors[f.first] = keep(f.second.detach().reshape(ignored.param.sizes()));
      }
    }
  }

  OptimStateDict take() { return std::move(out_); }

 private:
  at::Tensor keep(const at::Tensor& value) {
    return detail::keep_copy(value, options_.offload_to_cpu(), accounting_);
  }

  // A unit that is not sharded holds whole tensors already.
  void copy_whole_field(const detail::FlatParamGroup& group, size_t first, const std::string& field) {
    if (!keep_) return;
    for (size_t i = first; i < first + num_params(group); ++i) {
      if (const at::Tensor* value = local_.find(i, field)) {
        out_[group.names()[i - first]].tensors[field] =
            keep(value->detach().reshape(group.shapes()[i - first]));
      }
    }
  }

  // This rank's shard of `field`, laid out like the unit's flat shard
  // (zeros where a parameter has no state).
  at::Tensor field_shard(const detail::FlatParamGroup& group, size_t first, const std::string& field) const {
    const auto& layout = group.layout();
    at::Tensor shard = at::zeros({layout.shard_numel()}, group.sharded_flat().options());
    for (size_t i = first; i < first + num_params(group); ++i) {
      const at::Tensor* value = local_.find(i, field);
      if (!value) continue;
      const auto slice =
          layout.local_slice(static_cast<int64_t>(i - first), group.groups().shard->rank());
      if (slice.numel > 0) shard.narrow(0, slice.shard_offset, slice.numel).copy_(value->reshape(-1));
    }
    return shard;
  }

  void gather_field(const detail::FlatParamGroup& group, size_t first, const std::string& field) {
    const auto& layout = group.layout();
    at::Tensor flat = detail::gather_unit_flat(group, field_shard(group, first, field), accounting_);
    if (keep_) {
      for (size_t i = first; i < first + num_params(group); ++i) {
        if (!presence_.fields[i].count(field)) continue;
        const auto& slot = layout.slot(static_cast<int64_t>(i - first));
        out_[group.names()[i - first]].tensors[field] =
            keep(flat.narrow(0, slot.offset, slot.numel).view(group.shapes()[i - first]));
      }
    }
    accounting_.buffer_freed(static_cast<int64_t>(flat.nbytes()));
  }

  const FullStateDictOptions& options_;
  const bool keep_;  // this rank returns the dict
  detail::GatherAccounting accounting_;
  const LocalStates local_;
  const StatePresence presence_;
  OptimStateDict out_;
};

}  // namespace

OptimStateDict full_optim_state_dict(const UnitModule& root, const torch::optim::Optimizer& optimizer,
                                     const FullStateDictOptions& options, StateDictStats* stats) {
  detail::RootState& state = detail::idle_root_state(root, "full_optim_state_dict");
  detail::check_supported_optimizer(optimizer, "full_optim_state_dict");
  at::NoGradGuard no_grad;
  LocalStates local = read_local_states(state, optimizer);
  StatePresence presence = agree_on_presence(state.world(), local);
  const bool keep = !options.rank0_only() || state.world().rank() == 0;
  FullOptimStateBuilder builder(options, keep, stats, std::move(local), std::move(presence));
  size_t first = 0;  // position of the unit's first parameter in unit pre-order
  for (const auto& unit : state.units()) {
    builder.add_unit(unit->params(), first);
    first += num_params(unit->params());
  }
  builder.add_ignored_params(state, optimizer);
  return builder.take();
}

}  // namespace fsdp
