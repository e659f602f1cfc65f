#include "fsdp/options.h"

#include <c10/util/Exception.h>

#include <ostream>

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

std::ostream& operator<<(std::ostream& os, ShardingStrategy strategy) {
  return os << to_string(strategy);
}

void FullyShardOptions::validate() const {
  const bool hybrid = strategy_ == ShardingStrategy::kHybridShard ||
                      strategy_ == ShardingStrategy::kHybridShardZero2;
  if (hybrid) {
    TORCH_CHECK((mesh_ && mesh_->world && mesh_->shard && mesh_->replicate) ||
                    (!mesh_ && process_group_),
                "fsdp: strategy ", to_string(strategy_),
                " needs a 2-D mesh; pass .mesh(std::make_shared<fsdp::DeviceMesh>("
                "fsdp::make_hybrid_mesh(world, ranks_per_node))), or only .process_group(world) "
                "to shard within each node (LOCAL_WORLD_SIZE ranks)");
  } else {
    TORCH_CHECK(process_group_, "fsdp: FullyShardOptions has no process group; pass "
                                ".process_group(fsdp::init_process_group_from_env()) or another "
                                "fsdp::ProcessGroup");
  }
  TORCH_CHECK(max_inflight_all_gathers_ >= 1, "fsdp: max_inflight_all_gathers is ",
              max_inflight_all_gathers_, "; it must be at least 1");
  const int k = reshard_after_forward_group_size_;
  TORCH_CHECK(k >= 0, "fsdp: reshard_after_forward_group_size is ", k,
              "; it must be 0 (unset), 1 (keep full parameters) or a divisor of the shard group "
              "size");
  const bool zero2_like = strategy_ == ShardingStrategy::kShardGradOp ||
                          strategy_ == ShardingStrategy::kHybridShardZero2 ||
                          strategy_ == ShardingStrategy::kNoShard;
  TORCH_CHECK(k <= 1 || !zero2_like, "fsdp: reshard_after_forward_group_size(", k,
              ") has no effect with strategy ", to_string(strategy_),
              ", which never reshards after forward; use kFullShard or kHybridShard, or drop "
              "the option");
  TORCH_CHECK(k <= 1 || reshard_after_forward_.value_or(true), "fsdp: reshard_after_forward is "
              "false but reshard_after_forward_group_size is ", k,
              "; set only one of them (group size 1 means no resharding)");
  for (size_t i = 0; i < ignored_params_.size(); ++i) {
    TORCH_CHECK(ignored_params_[i].defined(), "fsdp: ignored_params[", i,
                "] is an undefined tensor; pass the module's parameters themselves");
  }
  for (size_t i = 0; i < ignored_modules_.size(); ++i) {
    TORCH_CHECK(ignored_modules_[i] != nullptr, "fsdp: ignored_modules[", i,
                "] is nullptr; pass the modules themselves (holder.ptr())");
  }
  for (const auto& dtype : {mp_.param_dtype(), mp_.reduce_dtype(), mp_.output_dtype()}) {
    TORCH_CHECK(!dtype || at::isFloatingType(*dtype), "fsdp: mixed precision dtype ", *dtype,
                " is not a floating-point type; use at::kBFloat16, at::kHalf or at::kFloat");
  }
}

}  // namespace fsdp
