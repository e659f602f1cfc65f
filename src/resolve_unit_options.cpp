#include "resolve_unit_options.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

#include "fsdp/error_message.h"
#include "strategy_traits.h"
#include "unit_name.h"

namespace fsdp::detail {
namespace {

void check_unit_options(const UnitOptions& options, const DiscoveredUnit& unit,
                        ShardingStrategy strategy) {
  try {
    options.validate(strategy);
  } catch (const c10::Error& e) {
    std::string message = error_message(e);
    if (message.rfind("fsdp: ", 0) == 0) message = message.substr(6);
    TORCH_CHECK(false, "fsdp: the UnitOptions of unit '", display_name(unit.name), "': ", message);
  }
}

// A group of 1 keeps everything: the same as not resharding (FSDP2). A group
// of the whole shard group is a plain reshard.
int post_forward_group_size(int k, bool reshards, const DiscoveredUnit& unit, int shard_size) {
  if (k == 0 || !reshards) return 0;
  TORCH_CHECK(shard_size % k == 0, "fsdp: reshard_after_forward_group_size is ", k, " for unit '",
              display_name(unit.name), "', which does not divide the shard group size ",
              shard_size, "; pick a divisor of it (e.g. the ranks per node)");
  return k == shard_size ? 0 : k;
}

at::ScalarType param_dtype_of(const DiscoveredUnit& unit) {
  return unit.params.empty() ? at::kFloat : unit.params[0].scalar_type();
}

FlatParamConfig resolve_flat_config(const DiscoveredUnit& unit,
                                    const FullyShardOptions& root_options,
                                    const MixedPrecisionPolicy& mp) {
  FlatParamConfig flat;
  flat.compute_dtype = mp.param_dtype().value_or(param_dtype_of(unit));
  flat.reduce_dtype = mp.reduce_dtype().value_or(flat.compute_dtype);
  // Offload is the whole model's choice: every unit's shards live in one place.
  flat.offload_to_cpu = root_options.offload().offload_params();
  flat.pin_memory = root_options.offload().pin_memory();
  flat.compression = root_options.compression();
  return flat;
}

// Whether and how the unit reshards after forward. A post-forward group of
// 1 keeps everything, which is not resharding.
void resolve_resharding(UnitPlan& plan, const DiscoveredUnit& unit,
                        const FullyShardOptions& root_options, int shard_size) {
  const UnitOptions& own = unit.module->unit_options();
  const bool is_root = unit.name.empty();
  const int k = own.reshard_after_forward_group_size().value_or(
      root_options.reshard_after_forward_group_size());
  plan.reshards_after_forward =
      traits_of(root_options.strategy()).regathers_in_backward && k != 1 &&
      own.reshard_after_forward().value_or(root_options.reshard_after_forward().value_or(!is_root));
  plan.post_forward_group_size =
      post_forward_group_size(k, plan.reshards_after_forward, unit, shard_size);
}

UnitPlan resolve_plan(const DiscoveredUnit& unit, const FullyShardOptions& root_options,
                      const FlatParamConfig& flat, const UnitGroups& groups) {
  UnitPlan plan;
  plan.shards_across_ranks = groups.shard->size() > 1;
  plan.replicates = groups.replicate != nullptr;
  plan.aliased = !plan.shards_across_ranks && flat.compute_dtype == param_dtype_of(unit) &&
                 !flat.offload_to_cpu;
  plan.reduces_grads = !plan.aliased || plan.replicates;
  plan.keeps_params_whole = unit.module->unit_options().keep_params_whole();
  resolve_resharding(plan, unit, root_options, groups.shard->size());
  return plan;
}

}  // namespace

ResolvedUnitOptions resolve_unit_options(const DiscoveredUnit& unit,
                                         const FullyShardOptions& root_options,
                                         const UnitGroups& groups) {
  const UnitOptions& own = unit.module->unit_options();
  check_unit_options(own, unit, root_options.strategy());
  const MixedPrecisionPolicy mp = own.mp().value_or(root_options.mp());
  ResolvedUnitOptions resolved;

  UnitConfig& config = resolved.unit;
  config.name = unit.name;
  config.is_root = unit.name.empty();
  config.prefetch = own.prefetch().value_or(root_options.prefetch());
  if (mp.param_dtype() && mp.cast_forward_inputs()) config.cast_inputs_to = mp.param_dtype();
  config.cast_outputs_to = mp.output_dtype();

  resolved.flat = resolve_flat_config(unit, root_options, mp);
  resolved.plan = resolve_plan(unit, root_options, resolved.flat, groups);
  return resolved;
}

bool validate_every_step_from_env() {
  const char* debug = std::getenv("FSDP_DEBUG");
  return debug != nullptr && std::string(debug) != "0";
}

}  // namespace fsdp::detail
