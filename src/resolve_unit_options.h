#pragma once
// Every choice fully_shard makes for one unit, decided in one place: the
// root's FullyShardOptions, the unit's own UnitOptions, and what the
// strategy means (strategy_traits.h).

#include "flat_param_group.h"
#include "fsdp/options.h"
#include "unit_discovery.h"
#include "unit_state.h"

namespace fsdp::detail {

struct ResolvedUnitOptions {
  UnitConfig unit;       // the lifecycle's choices (UnitState)
  FlatParamConfig flat;  // the storage's choices (FlatParamGroup)
  // k of the k-rank post-forward group, or 0 for none (a plain reshard, or
  // no reshard). See [Note: resharding to a smaller group].
  int post_forward_group_size = 0;
};

// Throws c10::Error naming the unit, when its UnitOptions are invalid for
// the root's strategy or its group size does not divide `shard_size`.
ResolvedUnitOptions resolve_unit_options(const DiscoveredUnit& unit,
                                         const FullyShardOptions& root_options, int shard_size);

}  // namespace fsdp::detail
