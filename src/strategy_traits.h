#pragma once
// What each ShardingStrategy means, in one table. Every other place asks
// traits_of() instead of listing strategies. See [Note: strategy traits].

#include "fsdp/options.h"

namespace fsdp::detail {

// How a unit's gradients are combined across ranks.
enum class GradientReduction {
  kReduceScatter,               // within the shard group (the world)
  kReduceScatterThenAllReduce,  // within each shard group, then across replicas
  kAllReduce,                   // nothing sharded: across the world
};

struct StrategyTraits {
  // Parameters, gradients and optimizer state are split across ranks.
  bool shards_params;
  // Gathered parameters are freed after forward and gathered again for
  // backward (by default, for non-root units); otherwise they stay gathered
  // from forward to the end of backward (ZeRO-2).
  bool regathers_in_backward;
  // The ranks form a 2-D mesh: sharded within a group, replicated across.
  bool replicates_across_groups;
  // Backward all-gathers parameters (sharded and re-gathered), so a
  // reduce-scatter can hold up the next unit's gather: see [Note: a lane for
  // reduce-scatters] in fully_shard.cpp.
  bool all_gathers_in_backward;
  GradientReduction reduction;
};

const StrategyTraits& traits_of(ShardingStrategy strategy);

}  // namespace fsdp::detail
