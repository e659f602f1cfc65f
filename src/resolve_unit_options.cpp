#include "resolve_unit_options.h"

#include <c10/util/Exception.h>

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

}  // namespace

ResolvedUnitOptions resolve_unit_options(const DiscoveredUnit& unit,
                                         const FullyShardOptions& root_options, int shard_size) {
  const UnitOptions& own = unit.module->unit_options();
  check_unit_options(own, unit, root_options.strategy());
  const StrategyTraits& traits = traits_of(root_options.strategy());
  const MixedPrecisionPolicy mp = own.mp().value_or(root_options.mp());
  ResolvedUnitOptions resolved;

  UnitConfig& config = resolved.unit;
  config.name = unit.name;
  config.is_root = unit.name.empty();
  config.reshard_after_forward =
      traits.regathers_in_backward &&
      own.reshard_after_forward().value_or(root_options.reshard_after_forward().value_or(!config.is_root));
  config.prefetch = own.prefetch().value_or(root_options.prefetch());
  if (mp.param_dtype() && mp.cast_forward_inputs()) config.cast_inputs_to = mp.param_dtype();
  config.cast_outputs_to = mp.output_dtype();

  const int k = own.reshard_after_forward_group_size().value_or(
      root_options.reshard_after_forward_group_size());
  if (k == 1) config.reshard_after_forward = false;
  resolved.post_forward_group_size =
      post_forward_group_size(k, config.reshard_after_forward, unit, shard_size);

  FlatParamConfig& flat = resolved.flat;
  const at::ScalarType param_dtype = unit.params.empty() ? at::kFloat : unit.params[0].scalar_type();
  flat.compute_dtype = mp.param_dtype().value_or(param_dtype);
  flat.reduce_dtype = mp.reduce_dtype().value_or(flat.compute_dtype);
  // Offload is the whole model's choice: every unit's shards live in one place.
  flat.offload_to_cpu = root_options.offload().offload_params();
  flat.pin_memory = root_options.offload().pin_memory();
  flat.compression = root_options.compression();
  return resolved;
}

}  // namespace fsdp::detail
