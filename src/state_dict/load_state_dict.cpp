// fsdp::load_full_state_dict: a whole state dict into a sharded model, each
// rank keeping its slice; at any world size.
//
// With every rank holding the dict there is no communication: each rank
// checks the dict itself (the same dict gives the same verdict everywhere)
// and copies its run of each flattened tensor. With rank0_only, rank 0
// checks it and sends the verdict (which tensors load) to every rank, then
// broadcasts one tensor at a time, so each rank's extra memory is one tensor.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <set>
#include <sstream>

#include "fsdp/introspection.h"
#include "fsdp/state_dict.h"
#include "state_dict/load_decision.h"
#include "state_dict/unit_gather.h"

namespace fsdp {
namespace {

// One tensor the model expects: a parameter (its shard) or a buffer.
struct Target {
  std::string name;
  std::vector<int64_t> shape;
  at::Tensor param;  // the parameter's local shard (1-D) or aliased whole
  int64_t flat_begin = 0;
  int64_t numel = 0;
  at::Tensor buffer;  // defined for buffers
};

std::vector<Target> targets_of(UnitModule& root) {
  std::vector<Target> targets;
  for (const auto& shard : param_shards(root)) {
    targets.push_back(Target{shard.name, shard.full_shape, shard.param, shard.flat_begin, shard.numel, {}});
  }
  for (const auto& b : root.named_buffers()) {
    targets.push_back(Target{b.key(), b.value().sizes().vec(), {}, 0, b.value().numel(), b.value()});
  }
  return targets;
}

std::string shape_string(c10::IntArrayRef shape) {
  std::ostringstream s;
  s << shape;
  return s.str();
}

// Which targets load from `dict`, and what does not match.
std::vector<bool> check_dict(const std::vector<Target>& targets, const StateDict& dict,
                             LoadStateDictResult* result) {
  std::vector<bool> loads(targets.size(), false);
  std::set<std::string> known;
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    known.insert(t.name);
    const at::Tensor* value = dict.find(t.name);
    if (!value) {
      result->missing.push_back(t.name);
    } else if (value->sizes().vec() != t.shape) {
      result->mismatched.push_back(t.name + ": state dict has " + shape_string(value->sizes()) +
                                   ", model has " + shape_string(t.shape));
    } else {
      loads[i] = true;
    }
  }
  for (const auto& item : dict) {
    if (!known.count(item.key())) result->unexpected.push_back(item.key());
  }
  return loads;
}

void copy_slice(const Target& t, const at::Tensor& full) {
  if (t.buffer.defined()) {
    t.buffer.copy_(full.reshape(t.shape));
  } else if (t.numel > 0) {
    t.param.detach().view({-1}).copy_(full.reshape(-1).narrow(0, t.flat_begin, t.numel));
  }
}

}  // namespace

LoadStateDictResult load_full_state_dict(UnitModule& root, const StateDict& state_dict,
                                         const LoadStateDictOptions& options) {
  detail::RootState& state = detail::idle_root_state(root, "load_full_state_dict");
  ProcessGroup& world = state.world();
  const std::vector<Target> targets = targets_of(root);
  const bool rank0_only = options.rank0_only() && world.size() > 1;

  // See [Note: one decision per load] in load_decision.h.
  const detail::LoadDecision decision = detail::agree_on_load(
      world, "load_full_state_dict", options, targets.size(), "parameters and buffers", [&] {
        detail::LoadDecision mine;
        for (bool load : check_dict(targets, state_dict, &mine.problems)) {
          detail::LoadPlanEntry entry;
          entry.load = load;
          mine.plan.push_back(std::move(entry));
        }
        return mine;
      });
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!decision.plan[i].load) continue;
    const Target& t = targets[i];
    if (!rank0_only) {
      copy_slice(t, *state_dict.find(t.name));
      continue;
    }
    const at::ScalarType dtype = t.buffer.defined() ? t.buffer.scalar_type() : t.param.scalar_type();
    const auto full_options = at::TensorOptions().dtype(dtype).device(detail::comm_device(world));
    at::Tensor full = world.rank() == 0
                          ? state_dict.find(t.name)->to(full_options, false, /*copy=*/true).contiguous()
                          : at::empty(t.shape, full_options);
    world.broadcast(full, 0)->wait();
    copy_slice(t, full);
  }
  return decision.problems;
}

}  // namespace fsdp
