#pragma once
// Every choice fully_shard makes for one unit, decided in one place: the
// root's FullyShardOptions, the unit's own UnitOptions, what the strategy
// means (strategy_traits.h) and the unit's groups.

#include "flat_param_group.h"
#include "fsdp/options.h"
#include "unit_discovery.h"
#include "unit_plan.h"
#include "unit_state.h"

namespace fsdp::detail {

struct ResolvedUnitOptions {
  UnitConfig unit;       // the lifecycle's choices (UnitState)
  FlatParamConfig flat;  // the storage's choices (FlatParamGroup)
  UnitPlan plan;         // what follows from them; see [Note: a unit's plan]
};

// Throws c10::Error naming the unit, when its UnitOptions are invalid for
// the root's strategy or its post-forward group size does not divide the
// shard group's.
ResolvedUnitOptions resolve_unit_options(const DiscoveredUnit& unit,
                                         const FullyShardOptions& root_options,
                                         const UnitGroups& groups);

// Whether the environment asks to validate every step, not only the first
// (FSDP_DEBUG set to anything but 0). Read once, by fully_shard.
bool validate_every_step_from_env();

}  // namespace fsdp::detail
