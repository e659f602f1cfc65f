#include "training_setup.h"

#include <fmt/format.h>

#include <stdexcept>

namespace fsdp_plan {

int TrainingSetup::shard_size() const {
  switch (strategy) {
    case Strategy::kNoShard: return 1;
    case Strategy::kHybridShard:
    case Strategy::kHybridShardZero2: return nproc_per_node;
    default: return world_size();
  }
}

bool TrainingSetup::hybrid() const {
  return strategy == Strategy::kHybridShard || strategy == Strategy::kHybridShardZero2;
}

bool TrainingSetup::regathers_in_backward() const {
  const bool reshards = strategy == Strategy::kFullShard || strategy == Strategy::kHybridShard;
  return reshards && reshard_after_forward && shard_size() > 1;
}

const char* to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::kFullShard: return "full";
    case Strategy::kShardGradOp: return "grad-op";
    case Strategy::kNoShard: return "none";
    case Strategy::kHybridShard: return "hybrid";
    case Strategy::kHybridShardZero2: return "hybrid-zero2";
  }
  return "?";
}

const char* to_string(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kAdamW: return "adamw";
    case Optimizer::kSgdMomentum: return "sgd-momentum";
    case Optimizer::kSgd: return "sgd";
  }
  return "?";
}

Strategy parse_strategy(const std::string& name) {
  for (Strategy s : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard,
                     Strategy::kHybridShard, Strategy::kHybridShardZero2}) {
    if (name == to_string(s)) return s;
  }
  throw std::runtime_error(fmt::format(
      "--strategy '{}' is not one of full (ZeRO-3), grad-op (ZeRO-2), none (DDP-like), hybrid "
      "(ZeRO-3 inside a node, replicated across), hybrid-zero2",
      name));
}

Optimizer parse_optimizer(const std::string& name) {
  for (Optimizer o : {Optimizer::kAdamW, Optimizer::kSgdMomentum, Optimizer::kSgd}) {
    if (name == to_string(o)) return o;
  }
  throw std::runtime_error(
      fmt::format("--optimizer '{}' is not one of adamw, sgd-momentum, sgd", name));
}

int parse_checkpointing(const std::string& value) {
  if (value == "none") return 0;
  if (value == "all") return 1;
  const std::string prefix = "every-";
  if (value.rfind(prefix, 0) == 0 && value.size() > prefix.size() && value.size() < prefix.size() + 9 &&
      value.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
    const int n = std::stoi(value.substr(prefix.size()));
    if (n > 0) return n;
  }
  throw std::runtime_error(fmt::format(
      "--activation-checkpointing '{}' is not none, all or every-N (N >= 1, e.g. every-2)", value));
}

std::string checkpointing_name(int every) {
  if (every == 0) return "none";
  if (every == 1) return "all";
  return fmt::format("every-{}", every);
}

int optimizer_states_per_param(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kAdamW: return 2;
    case Optimizer::kSgdMomentum: return 1;
    case Optimizer::kSgd: return 0;
  }
  return 0;
}

std::string setup_problem(const TrainingSetup& s) {
  if (s.nnodes < 1) return fmt::format("--nnodes is {}; pass 1 or more", s.nnodes);
  if (s.nproc_per_node < 1) return fmt::format("--nproc-per-node is {}; pass 1 or more", s.nproc_per_node);
  if (s.micro_batch < 1) return fmt::format("--micro-batch is {}; pass 1 or more", s.micro_batch);
  if (s.grad_accum < 1) return fmt::format("--grad-accum is {}; pass 1 or more", s.grad_accum);
  if (s.max_inflight_all_gathers < 1) {
    return fmt::format("--max-inflight-all-gathers is {}; pass 1 or more", s.max_inflight_all_gathers);
  }
  if (s.hybrid() && s.nnodes < 2) {
    return fmt::format("--strategy {} replicates across nodes, but --nnodes is {}; use full, or "
                       "pass --nnodes 2 or more",
                       to_string(s.strategy), s.nnodes);
  }
  if (s.reshard_group != 0) {
    if (s.strategy != Strategy::kFullShard && s.strategy != Strategy::kHybridShard) {
      return fmt::format("--reshard-group {} needs --strategy full or hybrid (got {})",
                         s.reshard_group, to_string(s.strategy));
    }
    if (s.reshard_group < 2 || s.shard_size() % s.reshard_group != 0 ||
        s.reshard_group >= s.shard_size()) {
      return fmt::format("--reshard-group {} must be at least 2, smaller than the shard group ({} "
                         "ranks) and divide it; e.g. --reshard-group {}",
                         s.reshard_group, s.shard_size(), s.nproc_per_node > 1 ? s.nproc_per_node : 2);
    }
  }
  return "";
}

}  // namespace fsdp_plan
