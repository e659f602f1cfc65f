// Training under FSDP with activation checkpointing, against the same run
// without it: the recomputation computes the same values, so on the CPU
// every gradient (and every parameter after AdamW) must be bitwise equal,
// step after step, with the same collectives: the recomputation uses the
// backward all-gather FSDP does anyway. Parity with one process then follows
// from the parity suite; one case here checks it directly too.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "fsdp/fsdp.h"
#include "harness/bitwise.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 12;  // divisible by world sizes 1-4

struct RunRecord {
  std::vector<std::vector<at::Tensor>> grads;  // per step, this rank's shards
  std::vector<CommCounters> comm;              // per step, forward + backward
  std::vector<at::Tensor> params;              // after the last step
};

using MakeOptions = std::function<FullyShardOptions(RankContext&)>;

// Trains a GPT under FSDP with the given blocks checkpointed, in
// `micro_batches` micro-batches per step (no sync for all but the last).
RunRecord train_gpt(RankContext& ctx, models::GPTConfig config, int64_t checkpoint_every,
                    const models::GPT& initial, const MakeOptions& options, const at::Tensor& tokens,
                    int micro_batches = 1) {
  config.checkpoint_every = checkpoint_every;
  models::GPT local(config);
  copy_state(*local, *initial);
  auto model = fully_shard(local, options(ctx));
  auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
  RunRecord record;
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor rows = local_rows(tokens[step], ctx.rank, ctx.world_size);
    const CommCounters start = ctx.group->counters();
    opt->zero_grad();
    for (int micro = 0; micro < micro_batches; ++micro) {
      at::Tensor x = rows.chunk(micro_batches)[micro];
      const bool last = micro + 1 == micro_batches;
      model->set_requires_gradient_sync(last);
      models::lm_loss(model->forward(x), x).backward();
    }
    record.comm.push_back(ctx.group->counters() - start);
    record.grads.push_back(grads_of(*model));
    opt->step();
  }
  for (const auto& p : model->parameters()) record.params.push_back(p.detach().clone());
  return record;
}

void expect_same_runs(const RunRecord& plain, const RunRecord& checkpointed, const std::string& where) {
  for (int step = 0; step < kSteps; ++step) {
    const std::string at_step = where + " step " + std::to_string(step);
    expect_bitwise(plain.grads[step], checkpointed.grads[step], at_step + " gradients");
    EXPECT_EQ(plain.comm[step].all_gather, checkpointed.comm[step].all_gather) << at_step << ": all-gathers";
    EXPECT_EQ(plain.comm[step].reduce_scatter, checkpointed.comm[step].reduce_scatter)
        << at_step << ": reduce-scatters";
    EXPECT_EQ(plain.comm[step].all_reduce, checkpointed.comm[step].all_reduce) << at_step << ": all-reduces";
  }
  expect_bitwise(plain.params, checkpointed.params, where + " parameters after AdamW");
}

struct StrategyCase {
  int world_size;
  ShardingStrategy strategy;
};

std::string strategy_case_name(const ::testing::TestParamInfo<StrategyCase>& info) {
  return "ws" + std::to_string(info.param.world_size) + "_" + to_string(info.param.strategy);
}
void PrintTo(const StrategyCase& c, std::ostream* os) { *os << strategy_case_name({c, 0}); }

class CheckpointedStrategies : public ::testing::TestWithParam<StrategyCase> {};

TEST_P(CheckpointedStrategies, GptGradientsBitwiseEqualWithTheSameCollectives) {
  const StrategyCase c = GetParam();
  auto config = tiny_gpt_config(true);
  config.n_layer = 3;
  at::manual_seed(21);
  models::GPT initial(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kGlobalBatch, config.context});
  const MakeOptions options = [&](RankContext& ctx) { return FullyShardOptions(ctx.group).strategy(c.strategy); };
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const RunRecord plain = train_gpt(ctx, config, 0, initial, options, tokens);
    for (int64_t every : {1, 2}) {
      expect_same_runs(plain, train_gpt(ctx, config, every, initial, options, tokens),
                       rank_str(ctx) + " every " + std::to_string(every));
    }
  });
}

TEST_P(CheckpointedStrategies, MlpGradientsBitwiseEqual) {
  const StrategyCase c = GetParam();
  at::manual_seed(22);
  Mlp initial(7, 10, 3, true);
  at::Tensor inputs = at::randn({kSteps, kGlobalBatch, 7});
  at::Tensor targets = at::randn({kSteps, kGlobalBatch, 3});
  run_ranks(c.world_size, [&](RankContext& ctx) {
    std::vector<RunRecord> runs;
    for (bool checkpoint : {false, true}) {
      Mlp local(7, 10, 3, true);
      copy_state(*local, *initial);
      for (const auto& module : local->layers->children()) {
        if (auto* unit = dynamic_cast<UnitModule*>(module.get())) unit->set_activation_checkpointing(checkpoint);
      }
      auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
      auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
      RunRecord record;
      for (int step = 0; step < kSteps; ++step) {
        at::Tensor x = local_rows(inputs[step], ctx.rank, ctx.world_size);
        at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
        opt->zero_grad();
        const CommCounters start = ctx.group->counters();
        at::mse_loss(model->forward(x), y).backward();
        record.comm.push_back(ctx.group->counters() - start);
        record.grads.push_back(grads_of(*model));
        opt->step();
      }
      for (const auto& p : model->parameters()) record.params.push_back(p.detach().clone());
      runs.push_back(std::move(record));
    }
    expect_same_runs(runs[0], runs[1], rank_str(ctx));
  });
}

std::vector<StrategyCase> strategy_cases() {
  std::vector<StrategyCase> cases;
  for (int ws = 1; ws <= 4; ++ws) {
    for (auto s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
      cases.push_back({ws, s});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Core, CheckpointedStrategies, ::testing::ValuesIn(strategy_cases()),
                         strategy_case_name);

// --- Composition with the rest of FSDP ---------------------------------------

struct CompositionCase {
  std::string name;
  int world_size;
  MakeOptions options;
  int micro_batches;
};

void PrintTo(const CompositionCase& c, std::ostream* os) { *os << c.name; }

class CheckpointedComposition : public ::testing::TestWithParam<CompositionCase> {};

TEST_P(CheckpointedComposition, GptGradientsBitwiseEqual) {
  const CompositionCase& c = GetParam();
  auto config = tiny_gpt_config(true);
  config.n_layer = 3;
  at::manual_seed(23);
  models::GPT initial(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kGlobalBatch, config.context});
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const RunRecord plain = train_gpt(ctx, config, 0, initial, c.options, tokens, c.micro_batches);
    const RunRecord all = train_gpt(ctx, config, 1, initial, c.options, tokens, c.micro_batches);
    expect_same_runs(plain, all, rank_str(ctx) + " " + c.name);
  });
}

std::vector<CompositionCase> composition_cases() {
  auto base = [](RankContext& ctx) { return FullyShardOptions(ctx.group); };
  return {
      {"no_prefetch", 2, [=](RankContext& ctx) { return base(ctx).prefetch(false); }, 1},
      {"bf16_compute_fp32_reduce", 2,
       [=](RankContext& ctx) {
         return base(ctx).mp(MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat));
       },
       1},
      {"offload", 2, [=](RankContext& ctx) { return base(ctx).offload(OffloadPolicy().offload_params(true)); }, 1},
      {"keep_gathered_after_forward", 2,
       [=](RankContext& ctx) { return base(ctx).reshard_after_forward(false); }, 1},
      {"reshard_to_group_of_2", 4,
       [=](RankContext& ctx) { return base(ctx).reshard_after_forward_group_size(2); }, 1},
      {"hybrid_2x2", 4,
       [](RankContext& ctx) {
         return FullyShardOptions(make_hybrid_mesh(ctx.group, 2)).strategy(ShardingStrategy::kHybridShard);
       },
       1},
      {"accumulate_3_micro_batches", 2, base, 3},
  };
}

INSTANTIATE_TEST_SUITE_P(Fsdp, CheckpointedComposition, ::testing::ValuesIn(composition_cases()),
                         [](const ::testing::TestParamInfo<CompositionCase>& info) { return info.param.name; });

// Against one process without checkpointing, SGD with momentum (no Adam
// epsilon to amplify rounding): the parity suite's bounds.
TEST(ActivationCheckpointingInUnits, MatchesSingleProcessTraining) {
  auto config = tiny_gpt_config(true);
  config.n_layer = 3;
  at::manual_seed(24);
  models::GPT reference(config);
  models::GPT initial(config);
  copy_state(*initial, *reference);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kGlobalBatch, config.context});
  auto ref_opt = make_optimizer(OptimizerKind::kSgdMomentum, reference->parameters());
  std::vector<double> ref_losses;
  for (int step = 0; step < kSteps; ++step) {
    ref_losses.push_back(lm_train_step(reference, *ref_opt, tokens[step]).item<double>());
  }
  run_ranks(3, [&](RankContext& ctx) {
    auto checkpointed = config;
    checkpointed.checkpoint_every = 1;
    models::GPT local(checkpointed);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      const double loss = global_mean(*ctx.group, lm_train_step(model, *opt, x).item<double>());
      EXPECT_LT(relative_diff(loss, ref_losses[step]), 1e-5) << rank_str(ctx) << " step " << step;
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-6, rank_str(ctx));
  });
}

}  // namespace
}  // namespace fsdp::testing
