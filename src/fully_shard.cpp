#include "fsdp/fully_shard.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_set>

#include "deferred_init.h"
#include "model_fingerprint.h"
#include "resolve_unit_options.h"
#include "root_state.h"
#include "strategy_traits.h"
#include "unit_discovery.h"
#include "unit_module_access.h"
#include "unit_state.h"

namespace fsdp {
namespace {

// A group of just this rank, for strategies that shard nothing.
ProcessGroupPtr make_self_group(const ProcessGroup& world) {
  GroupOptions options = world.options();
  options.name = world.options().name + "/self";
  return make_single_process_group(std::move(options));
}

detail::UnitGroups groups_for(const FullyShardOptions& options, const ProcessGroupPtr& world) {
  switch (detail::traits_of(options.strategy()).reduction) {
    case detail::GradientReduction::kReduceScatter:
      return {world, world, nullptr, nullptr};
    case detail::GradientReduction::kAllReduce: {
      ProcessGroupPtr self = make_self_group(*world);
      return {self, self, world->size() > 1 ? world : nullptr, nullptr};
    }
    case detail::GradientReduction::kReduceScatterThenAllReduce: {
      const auto& mesh = *options.mesh();
      return {mesh.shard, mesh.shard, mesh.replicate->size() > 1 ? mesh.replicate : nullptr,
              nullptr};
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown gradient reduction");
}

detail::IgnoredSet ignored_set(const FullyShardOptions& options) {
  detail::IgnoredSet ignored;
  for (const auto& module : options.ignored_modules()) ignored.modules.insert(module.get());
  for (const auto& param : options.ignored_params()) ignored.params.insert(param.unsafeGetTensorImpl());
  return ignored;
}

// [Note: a lane for reduce-scatters]
// A group runs its collectives in issue order on one lane: ProcessGroupNCCL's
// stream, or our Gloo worker thread. In backward that puts the prefetch
// all-gather of the next unit behind the reduce-scatter of the one that just
// finished, although neither needs the other. A sibling group over the same
// ranks is a second lane (on NCCL a second communicator, with its own
// stream), so the two run side by side; each still waits for the compute
// that produced its input, and compute waits for it through Work::wait()
// (events on CUDA). Every rank issues the same sequence of collectives, so
// the ranks agree on the order within each lane and across the two, which is
// what NCCL needs of concurrent communicators. By default only NCCL gets the
// lane, and only with strategies that gather again in backward: on Gloo the
// second worker thread competes with compute for the same cores, and
// without backward gathers there is nothing for a reduce-scatter to queue
// behind.
bool wants_reduce_scatter_lane(const FullyShardOptions& options, const ProcessGroup& shard) {
  if (shard.size() == 1) return false;  // nothing is reduce-scattered
  return options.separate_reduce_scatter_group().value_or(
      shard.options().backend == CommBackend::kNccl &&
      detail::traits_of(options.strategy()).all_gathers_in_backward);
}

// Groups of k consecutive ranks of `shard`, made once per k on every rank in
// the same order (new_subgroup is collective over `shard`).
ProcessGroupPtr post_forward_group(std::map<int, ProcessGroupPtr>& made, ProcessGroup& shard, int k) {
  auto it = made.find(k);
  if (it != made.end()) return it->second;
  ProcessGroupPtr mine;
  for (int first = 0; first < shard.size(); first += k) {
    std::vector<int> ranks;
    for (int r = first; r < first + k; ++r) ranks.push_back(r);
    auto group = shard.new_subgroup(ranks, shard.options().name + "/reshard" + std::to_string(k) +
                                               "[" + std::to_string(first / k) + "]");
    if (group) mine = std::move(group);
  }
  TORCH_INTERNAL_ASSERT(mine, "every rank is in one post-forward group");
  made.emplace(k, mine);
  return mine;
}

void broadcast_params(ProcessGroup& world, const detail::DiscoveredModel& model) {
  at::NoGradGuard no_grad;
  for (const auto& unit : model.units) {
    for (const auto& param : unit.params) {
      if (param.numel() == 0 || is_deferred(param)) continue;  // broadcast once initialized
      at::Tensor flat = param.is_contiguous() ? param : param.contiguous();
      world.broadcast(flat, 0)->wait();
      if (!flat.is_same(param)) param.copy_(flat);
    }
  }
}

void broadcast_buffers(ProcessGroup& world, const detail::DiscoveredModel& model) {
  at::NoGradGuard no_grad;
  for (const auto& buffer : model.buffers) {
    if (!buffer.defined() || buffer.numel() == 0) continue;
    at::Tensor flat = buffer.is_contiguous() ? buffer : buffer.contiguous();
    world.broadcast(flat, 0)->wait();
    if (!flat.is_same(buffer)) buffer.copy_(flat);
  }
}

// The hybrid strategies' default mesh: shard within a node.
FullyShardOptions with_default_mesh(const FullyShardOptions& user_options) {
  FullyShardOptions options = user_options;
  if (!detail::traits_of(options.strategy()).replicates_across_groups || options.mesh()) {
    return options;
  }
  try {
    options.mesh(make_hybrid_mesh_from_env(options.process_group()));
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "fsdp: strategy ", to_string(options.strategy()),
                " without a mesh shards within each node, which needs the launcher's "
                "environment (LOCAL_WORLD_SIZE): ", e.what_without_backtrace(),
                ". Pass .mesh(fsdp::make_hybrid_mesh(world, shard_size)) instead");
  }
  return options;
}

// The shard group, its reduce-scatter lane and the replicate group.
detail::UnitGroups make_unit_groups(const FullyShardOptions& options, const ProcessGroupPtr& world) {
  detail::UnitGroups groups = groups_for(options, world);
  if (wants_reduce_scatter_lane(options, *groups.shard)) {
    std::vector<int> all(static_cast<size_t>(groups.shard->size()));
    std::iota(all.begin(), all.end(), 0);
    groups.reduce_scatter =
        groups.shard->new_subgroup(all, groups.shard->options().name + "/reduce_scatter");
  }
  return groups;
}

// Wrap-time agreement across ranks: the same model, and rank 0's values
// where the options ask for them.
void sync_model_across_ranks(ProcessGroup& world, const detail::DiscoveredModel& model,
                             const FullyShardOptions& options) {
  detail::check_same_model_on_all_ranks(world, model);
  if (world.size() == 1) return;
  if (options.sync_module_states()) broadcast_params(world, model);
  if (options.sync_buffers() || options.sync_module_states()) broadcast_buffers(world, model);
}

void cast_buffers(detail::DiscoveredModel& model, const MixedPrecisionPolicy& mp) {
  const auto dtype = mp.buffer_dtype();
  if (!dtype) return;
  at::NoGradGuard no_grad;
  for (auto& buffer : model.buffers) {
    if (at::isFloatingType(buffer.scalar_type())) buffer.set_data(buffer.to(*dtype));
  }
}

// Each unit takes its parameters over. Every per-unit choice is resolved
// (and checked) before the first one does.
void shard_units(detail::DiscoveredModel& model, const FullyShardOptions& options,
                 const detail::UnitGroups& groups,
                 const std::shared_ptr<detail::RootState>& root_state) {
  std::vector<detail::ResolvedUnitOptions> resolved;
  for (const auto& unit : model.units) {
    resolved.push_back(detail::resolve_unit_options(unit, options, groups));
  }
  std::map<int, ProcessGroupPtr> post_forward_groups;
  for (size_t u = 0; u < model.units.size(); ++u) {
    auto& unit = model.units[u];
    detail::UnitGroups unit_groups = groups;
    if (const int k = resolved[u].plan.post_forward_group_size; k > 0) {
      unit_groups.post_forward = post_forward_group(post_forward_groups, *groups.shard, k);
    }
    auto params = std::make_unique<detail::FlatParamGroup>(
        std::move(unit.params), std::move(unit.param_names), std::move(unit_groups),
        resolved[u].flat, resolved[u].plan, root_state->counters());
    auto state =
        std::make_shared<detail::UnitState>(resolved[u].unit, std::move(params), root_state);
    root_state->add_unit(state);
    for (UnitModule* member : unit.members) detail::UnitModuleAccess::attach_unit_state(*member, state);
  }
}

// The parameters no unit took: ignored ones, each tensor once, under its
// first name.
std::vector<detail::IgnoredParam> params_outside_units(UnitModule& root,
                                                       const detail::RootState& root_state) {
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& unit : root_state.units()) {
    for (const auto& p : unit->params().params()) seen.insert(p.unsafeGetTensorImpl());
  }
  std::vector<detail::IgnoredParam> ignored;
  for (const auto& p : root.named_parameters()) {
    if (seen.insert(p.value().unsafeGetTensorImpl()).second) ignored.push_back({p.key(), p.value()});
  }
  return ignored;
}

}  // namespace

void fully_shard(UnitModule& root, const FullyShardOptions& user_options) {
  user_options.validate();
  const FullyShardOptions options = with_default_mesh(user_options);
  const ProcessGroupPtr world = detail::traits_of(options.strategy()).replicates_across_groups
                                    ? options.mesh()->world
                                    : options.process_group();
  detail::DiscoveredModel model = detail::discover_units(root, ignored_set(options));
  sync_model_across_ranks(*world, model, options);
  const detail::DeferredParams deferred = detail::find_deferred_params(model);
  cast_buffers(model, options.mp());
  const detail::UnitGroups groups = make_unit_groups(options, world);
  auto root_state = std::make_shared<detail::RootState>(world, options.max_inflight_all_gathers(),
                                                        detail::validate_every_step_from_env());
  shard_units(model, options, groups, root_state);
  root_state->set_ignored_params(params_outside_units(root, *root_state));
  const auto all_params = root.parameters();
  const bool ignored_deferred = std::any_of(all_params.begin(), all_params.end(),
                                            [](const at::Tensor& p) { return is_deferred(p); });
  if (!deferred.empty() || ignored_deferred) {
    detail::materialize_deferred(root, *root_state, deferred, options);
  }
  detail::UnitModuleAccess::attach_root_state(root, std::move(root_state));
}

NoSyncGuard::NoSyncGuard(UnitModule& unit) : unit_(unit) {
  for (detail::UnitState* state : detail::units_within(unit, /*recurse=*/true, "NoSyncGuard")) {
    previous_.push_back(state->switches().requires_grad_sync);
    state->switches().requires_grad_sync = false;
  }
}

NoSyncGuard::~NoSyncGuard() {
  // The same units, in the same order: a model's units do not change.
  const auto states = detail::units_within(unit_, /*recurse=*/true, "NoSyncGuard");
  for (size_t i = 0; i < states.size() && i < previous_.size(); ++i) {
    states[i]->switches().requires_grad_sync = previous_[i];
  }
}

}  // namespace fsdp
