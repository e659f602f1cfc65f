#pragma once
// How a model is to be trained: the choices fsdp-plan weighs.

#include <cstdint>
#include <string>

namespace fsdp_plan {

enum class Strategy { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };
enum class Optimizer { kAdamW, kSgdMomentum, kSgd };

struct TrainingSetup {
  int nnodes = 1;
  int nproc_per_node = 1;
  Strategy strategy = Strategy::kFullShard;
  bool bf16 = false;  // bf16 compute and all-gather; fp32 master weights and reduction
  bool offload = false;  // sharded parameters, gradients and optimizer state on the host
  bool reshard_after_forward = true;  // (only kFullShard and kHybridShard reshard)
  int reshard_group = 0;  // k > 1: keep a 1/k chunk between forward and backward
  int checkpoint_every = 0;  // 0 none, 1 every unit, N every Nth
  int64_t micro_batch = 1;   // samples per rank per micro-batch
  int64_t grad_accum = 1;    // micro-batches per optimizer step
  int64_t seq_len = 0;       // 0: the model's tokens_per_sample
  Optimizer optimizer = Optimizer::kAdamW;
  bool prefetch = true;
  int max_inflight_all_gathers = 2;

  int world_size() const { return nnodes * nproc_per_node; }
  // Ranks that split each unit's parameters.
  int shard_size() const;
  bool hybrid() const;
  // Units gathered again in backward (freed after forward).
  bool regathers_in_backward() const;
};

const char* to_string(Strategy strategy);
const char* to_string(Optimizer optimizer);
// The names fsdp-train and fsdp-plan accept ("full", "grad-op", "none",
// "hybrid", "hybrid-zero2"); throws naming the value and the choices.
Strategy parse_strategy(const std::string& name);
Optimizer parse_optimizer(const std::string& name);
// "none", "all" or "every-N"; throws naming the value.
int parse_checkpointing(const std::string& value);
std::string checkpointing_name(int every);

// Optimizer state elements per parameter element.
int optimizer_states_per_param(Optimizer optimizer);

// "" when the setup is consistent, else what is wrong and the fix.
std::string setup_problem(const TrainingSetup& setup);

}  // namespace fsdp_plan
