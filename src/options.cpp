#include "fsdp/options.h"

#include <c10/util/Exception.h>

namespace fsdp {

const char* to_string(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
    case ShardingStrategy::kHybridShardZero2: return "HYBRID_SHARD_ZERO2";
  }
  return "?";
}

void FullyShardOptions::validate() const {
  const bool hybrid = strategy_ == ShardingStrategy::kHybridShard ||
                      strategy_ == ShardingStrategy::kHybridShardZero2;
  if (hybrid) {
    TORCH_CHECK(mesh_ && mesh_->world && mesh_->shard && mesh_->replicate, "fsdp: strategy ",
                to_string(strategy_),
                " needs a 2-D mesh; pass .mesh(std::make_shared<fsdp::DeviceMesh>("
                "fsdp::make_hybrid_mesh(world, ranks_per_node)))");
  } else {
    TORCH_CHECK(process_group_, "fsdp: FullyShardOptions has no process group; pass "
                                ".process_group(fsdp::init_process_group_from_env()) or another "
                                "fsdp::ProcessGroup");
  }
  TORCH_CHECK(max_inflight_all_gathers_ >= 1, "fsdp: max_inflight_all_gathers is ",
              max_inflight_all_gathers_, "; it must be at least 1");
  for (const auto& dtype : {mp_.param_dtype(), mp_.reduce_dtype(), mp_.output_dtype()}) {
    TORCH_CHECK(!dtype || at::isFloatingType(*dtype), "fsdp: mixed precision dtype ", *dtype,
                " is not a floating-point type; use at::kBFloat16, at::kHalf or at::kFloat");
  }
}

}  // namespace fsdp
