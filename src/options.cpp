#include "fsdp/options.h"

#include <c10/util/Exception.h>

#include <ostream>
#include <utility>

#include "strategy_traits.h"

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

namespace {

void check_reshard_choice(ShardingStrategy strategy, c10::optional<bool> reshard_after_forward,
                          int group_size) {
  const int k = group_size;
  TORCH_CHECK(k >= 0, "fsdp: reshard_after_forward_group_size is ", k,
              "; it must be 0 (unset), 1 (keep full parameters) or a divisor of the shard group "
              "size");
  const detail::StrategyTraits& traits = detail::traits_of(strategy);
  TORCH_CHECK(k <= 1 || (traits.shards_params && traits.regathers_in_backward),
              "fsdp: reshard_after_forward_group_size(", k, ") has no effect with strategy ",
              to_string(strategy), ", which never reshards after forward; use kFullShard or "
              "kHybridShard, or drop the option");
  TORCH_CHECK(k <= 1 || reshard_after_forward.value_or(true), "fsdp: reshard_after_forward is "
              "false but reshard_after_forward_group_size is ", k,
              "; set only one of them (group size 1 means no resharding)");
}

void check_mixed_precision(const MixedPrecisionPolicy& mp) {
  for (const auto& dtype : {mp.param_dtype(), mp.reduce_dtype(), mp.output_dtype()}) {
    TORCH_CHECK(!dtype || at::isFloatingType(*dtype), "fsdp: mixed precision dtype ", *dtype,
                " is not a floating-point type; use at::kBFloat16, at::kHalf or at::kFloat");
  }
}

void check_compression(const CommCompression& compression) {
  const std::pair<const char*, Compression> choices[] = {
      {"weights", compression.weights()},
      {"grads", compression.grads()},
      {"replicate_grads", compression.replicate_grads()}};
  for (const auto& [name, choice] : choices) {
    TORCH_CHECK(choice.block_size() >= 1, "fsdp: compression ", name, " block_size is ",
                choice.block_size(), "; it must be at least 1 (256 is the default)");
  }
}

}  // namespace

FullyShardOptions::FullyShardOptions(DeviceMesh mesh) { this->mesh(std::move(mesh)); }

FullyShardOptions& FullyShardOptions::mesh(DeviceMesh mesh) {
  process_group_ = mesh.world;
  mesh_ = std::make_shared<DeviceMesh>(std::move(mesh));
  return *this;
}

void FullyShardOptions::validate() const {
  const detail::StrategyTraits& traits = detail::traits_of(strategy_);
  if (traits.replicates_across_groups) {
    TORCH_CHECK((mesh_ && mesh_->world && mesh_->shard && mesh_->replicate) ||
                    (!mesh_ && process_group_),
                "fsdp: strategy ", to_string(strategy_),
                " needs a 2-D mesh; pass FullyShardOptions(fsdp::make_hybrid_mesh(world, "
                "ranks_per_node)), or only FullyShardOptions(world) to shard within each node "
                "(LOCAL_WORLD_SIZE ranks)");
  } else {
    TORCH_CHECK(process_group_, "fsdp: FullyShardOptions has no process group; pass one, "
                                "as in FullyShardOptions(fsdp::init_process_group_from_env())");
  }
  TORCH_CHECK(max_inflight_all_gathers_ >= 1, "fsdp: max_inflight_all_gathers is ",
              max_inflight_all_gathers_, "; it must be at least 1");
  check_reshard_choice(strategy_, reshard_after_forward_,
                               reshard_after_forward_group_size_);
  for (size_t i = 0; i < ignored_params_.size(); ++i) {
    TORCH_CHECK(ignored_params_[i].defined(), "fsdp: ignored_params[", i,
                "] is an undefined tensor; pass the module's parameters themselves");
  }
  for (size_t i = 0; i < ignored_modules_.size(); ++i) {
    TORCH_CHECK(ignored_modules_[i] != nullptr, "fsdp: ignored_modules[", i,
                "] is nullptr; pass the modules themselves (holder.ptr())");
  }
  check_mixed_precision(mp_);
  check_compression(compression_);
}

void UnitOptions::validate(ShardingStrategy strategy) const {
  if (reshard_after_forward_group_size_ || reshard_after_forward_) {
    check_reshard_choice(strategy, reshard_after_forward_,
                                 reshard_after_forward_group_size_.value_or(0));
  }
  if (mp_) check_mixed_precision(*mp_);
  TORCH_CHECK(!keep_params_whole_ || detail::traits_of(strategy).shards_params,
              "fsdp: keep_params_whole has no effect with strategy ", to_string(strategy),
              ", where every rank holds every parameter whole; drop the option, or shard "
              "(e.g. kFullShard)");
}

}  // namespace fsdp
