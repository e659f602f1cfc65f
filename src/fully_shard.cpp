#include "fsdp/fully_shard.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "model_fingerprint.h"
#include "root_state.h"
#include "unit_discovery.h"
#include "unit_state.h"

namespace fsdp {
namespace {

bool is_hybrid(ShardingStrategy s) {
  return s == ShardingStrategy::kHybridShard || s == ShardingStrategy::kHybridShardZero2;
}

// A group of just this rank, for strategies that shard nothing.
ProcessGroupPtr make_self_group(const ProcessGroup& world) {
  GroupOptions options = world.options();
  options.name = world.options().name + "/self";
  return make_process_group(c10::make_intrusive<c10d::HashStore>(), 0, 1, options);
}

detail::UnitGroups groups_for(const FullyShardOptions& options, const ProcessGroupPtr& world) {
  switch (options.strategy()) {
    case ShardingStrategy::kFullShard:
    case ShardingStrategy::kShardGradOp:
      return {world, nullptr};
    case ShardingStrategy::kNoShard:
      return {make_self_group(*world), world->size() > 1 ? world : nullptr};
    case ShardingStrategy::kHybridShard:
    case ShardingStrategy::kHybridShardZero2: {
      const auto& mesh = *options.mesh();
      return {mesh.shard, mesh.replicate->size() > 1 ? mesh.replicate : nullptr};
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown sharding strategy");
}

detail::UnitConfig unit_config(const detail::DiscoveredUnit& unit, const FullyShardOptions& root_options) {
  const FullyShardOptions& options = unit.module->unit_options().value_or(root_options);
  detail::UnitConfig config;
  config.name = unit.name;
  config.is_root = unit.name.empty();
  const bool zero2 = root_options.strategy() == ShardingStrategy::kShardGradOp ||
                     root_options.strategy() == ShardingStrategy::kHybridShardZero2;
  config.reshard_after_forward =
      !zero2 && options.reshard_after_forward().value_or(!config.is_root);
  config.prefetch = options.prefetch();
  const auto& mp = options.mp();
  if (mp.param_dtype() && mp.cast_forward_inputs()) config.cast_inputs_to = mp.param_dtype();
  config.cast_outputs_to = mp.output_dtype();
  return config;
}

detail::FlatParamConfig flat_config(const detail::DiscoveredUnit& unit,
                                    const FullyShardOptions& root_options) {
  const FullyShardOptions& options = unit.module->unit_options().value_or(root_options);
  const at::ScalarType param_dtype = unit.params.empty() ? at::kFloat : unit.params[0].scalar_type();
  const auto& mp = options.mp();
  detail::FlatParamConfig config;
  config.compute_dtype = mp.param_dtype().value_or(param_dtype);
  config.reduce_dtype = mp.reduce_dtype().value_or(config.compute_dtype);
  config.offload_to_cpu = root_options.offload().offload_params();
  config.pin_memory = root_options.offload().pin_memory();
  return config;
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

}  // namespace

void fully_shard(UnitModule& root, const FullyShardOptions& options) {
  options.validate();
  const ProcessGroupPtr world = is_hybrid(options.strategy()) ? options.mesh()->world
                                                              : options.process_group();
  detail::DiscoveredModel model = detail::discover_units(root);
  detail::check_same_model_on_all_ranks(*world, model);
  if (options.sync_buffers() && world->size() > 1) broadcast_buffers(*world, model);
  if (const auto dtype = options.mp().buffer_dtype()) {
    at::NoGradGuard no_grad;
    for (auto& buffer : model.buffers) {
      if (at::isFloatingType(buffer.scalar_type())) buffer.set_data(buffer.to(*dtype));
    }
  }

  const detail::UnitGroups groups = groups_for(options, world);
  auto root_state =
      std::make_shared<detail::RootState>(world, options.max_inflight_all_gathers());
  for (auto& unit : model.units) {
    auto params = std::make_unique<detail::FlatParamGroup>(
        std::move(unit.params), std::move(unit.param_names), groups, flat_config(unit, options),
        &root_state->gathered_bytes());
    auto state = std::make_shared<detail::UnitState>(unit_config(unit, options), std::move(params),
                                                     root_state.get());
    root_state->add_unit(state);
    unit.module->set_unit_state(std::move(state));
  }
  root.set_root_state(std::move(root_state));
}

void set_requires_gradient_sync(UnitModule& root, bool requires_sync) {
  TORCH_CHECK(root.root_state(),
              "fsdp: set_requires_gradient_sync needs the root module that fully_shard returned");
  root.root_state()->set_requires_grad_sync(requires_sync);
}

NoSyncGuard::NoSyncGuard(UnitModule& root) : root_(root) {
  TORCH_CHECK(root.root_state(), "fsdp: NoSyncGuard needs the root module that fully_shard returned");
  previous_ = root.root_state()->requires_grad_sync();
  root.root_state()->set_requires_grad_sync(false);
}

NoSyncGuard::~NoSyncGuard() { root_.root_state()->set_requires_grad_sync(previous_); }

}  // namespace fsdp
