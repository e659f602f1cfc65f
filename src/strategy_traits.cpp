#include "strategy_traits.h"

#include <c10/util/Exception.h>

namespace fsdp::detail {

// [Note: strategy traits]
// kNoShard counts as re-gathering in backward: nothing is sharded, so its
// "gather" is only the mixed-precision cast copy of a world-size-1 unit,
// which is freed after forward and made again for backward like
// kFullShard's, unless the user keeps it with reshard_after_forward(false).
// It all-gathers nothing in backward, though: nothing is sharded.
const StrategyTraits& traits_of(ShardingStrategy strategy) {
  using R = GradientReduction;
  //                                  shards regathers replicates backward-gathers reduction
  static const StrategyTraits kFull{true, true, false, true, R::kReduceScatter};
  static const StrategyTraits kGradOp{true, false, false, false, R::kReduceScatter};
  static const StrategyTraits kNo{false, true, false, false, R::kAllReduce};
  static const StrategyTraits kHybrid{true, true, true, true, R::kReduceScatterThenAllReduce};
  static const StrategyTraits kHybridZero2{true, false, true, false,
                                           R::kReduceScatterThenAllReduce};
  switch (strategy) {
    case ShardingStrategy::kFullShard: return kFull;
    case ShardingStrategy::kShardGradOp: return kGradOp;
    case ShardingStrategy::kNoShard: return kNo;
    case ShardingStrategy::kHybridShard: return kHybrid;
    case ShardingStrategy::kHybridShardZero2: return kHybridZero2;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown sharding strategy ", static_cast<int>(strategy));
}

}  // namespace fsdp::detail
