#pragma once
// fully_shard's side of deferred initialization. See [Note: deferred
// initialization] in deferred_init.cpp and include/fsdp/deferred_init.h.

#include <unordered_set>

#include "fsdp/deferred_init.h"
#include "fsdp/options.h"
#include "root_state.h"
#include "unit_discovery.h"

namespace fsdp::detail {

// The deferred parameters of a model (by tensor identity), found before the
// units take their parameters over.
using DeferredParams = std::unordered_set<const c10::TensorImpl*>;
DeferredParams find_deferred_params(const DiscoveredModel& model);

// Initializes every deferred parameter of `root`'s model, module by module,
// writing each rank's slices into its units' shards. Collective over the
// world only with sync_module_states.
void materialize_deferred(UnitModule& root, RootState& state, const DeferredParams& deferred,
                          const FullyShardOptions& options);

}  // namespace fsdp::detail
