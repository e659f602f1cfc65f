// Reduce-scatters on a lane of their own (FullyShardOptions::
// separate_reduce_scatter_group; [Note: a lane for reduce-scatters] in
// src/fully_shard.cpp). On Gloo the lane is a second worker thread, so the
// logic CUDA relies on (a same-ranks sibling carrying every reduce-scatter,
// in the same order on every rank) is checked here on the CPU.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kBatch = 12;  // divisible by 2 and 3
// fp32 FSDP against one process: the bounds of the core parity suite. The
// reduction sums the ranks' gradients in another order than one process's
// backward does, and AdamW turns those last-bit differences into ~1e-6 steps.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

models::GPTConfig four_blocks() {
  auto config = tiny_gpt_config(true);
  config.n_layer = 4;
  return config;
}

struct LaneRun {
  std::vector<double> losses;            // global mean per step
  std::vector<at::Tensor> rank0_shards;  // rank 0's parameters after training
  bool lane_is_shard_group = true;       // every unit reduce-scattered on the shard group
  CommCounters shard_group_step;         // the last step's collectives on the shard group
  CommCounters lane_step;                // ... and on the reduce-scatter group
};

LaneRun train(int ws, c10::optional<bool> lane, const MixedPrecisionPolicy& mp,
              const torch::nn::Module& init, const at::Tensor& tokens) {
  LaneRun result;
  run_ranks(ws, [&](RankContext& ctx) {
    models::GPT local(four_blocks());
    copy_state(*local, init);
    auto model = fully_shard(local, FullyShardOptions(ctx.group)
                                        .mp(mp)
                                        .separate_reduce_scatter_group(lane));
    const ProcessGroupPtr reduce_group = unit_infos(*model).front().reduce_scatter_group;
    bool same_group_everywhere = true;
    for (const auto& info : unit_infos(*model)) {
      same_group_everywhere &= info.reduce_scatter_group == reduce_group;
    }
    EXPECT_TRUE(same_group_everywhere) << "every unit should use the one lane fully_shard made";
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    LaneRun mine;
    mine.lane_is_shard_group = reduce_group == ctx.group;
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      const CommCounters shard0 = ctx.group->counters();
      const CommCounters lane0 = reduce_group->counters();
      at::Tensor loss = lm_train_step(model, *opt, x);
      mine.shard_group_step = ctx.group->counters() - shard0;
      mine.lane_step = reduce_group->counters() - lane0;
      mine.losses.push_back(global_mean(*ctx.group, loss.item<double>()));
    }
    for (const auto& p : model->parameters()) mine.rank0_shards.push_back(p.detach().clone());
    if (ctx.rank == 0) result = std::move(mine);
  });
  return result;
}

void expect_bitwise_equal(const LaneRun& a, const LaneRun& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << what << " step " << i;
  ASSERT_EQ(a.rank0_shards.size(), b.rank0_shards.size());
  for (size_t i = 0; i < a.rank0_shards.size(); ++i) {
    EXPECT_TRUE(at::equal(a.rank0_shards[i], b.rank0_shards[i])) << what << ": parameter " << i;
  }
}

TEST(ReduceScatterLane, CarriesEveryReduceScatterAndTrainsBitwiseLikeTheSharedLane) {
  at::manual_seed(53);
  const auto config = four_blocks();
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kBatch, config.context});
  models::GPT init(config);
  const int64_t units = config.n_layer + 1;  // the blocks and the root
  const auto bf16 = MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat);
  for (int ws : {2, 3}) {
    for (const auto& mp : {MixedPrecisionPolicy(), bf16}) {
      const std::string what = "ws " + std::to_string(ws) + (mp.param_dtype() ? " bf16" : " fp32");
      const LaneRun shared = train(ws, false, mp, *init, tokens);
      const LaneRun separate = train(ws, true, mp, *init, tokens);
      expect_bitwise_equal(separate, shared, what);

      EXPECT_TRUE(shared.lane_is_shard_group) << what;
      EXPECT_EQ(shared.shard_group_step.reduce_scatter, units) << what;
      EXPECT_FALSE(separate.lane_is_shard_group) << what;
      // Every reduce-scatter moved to the lane; every all-gather stayed.
      EXPECT_EQ(separate.shard_group_step.reduce_scatter, 0) << what;
      EXPECT_EQ(separate.lane_step.reduce_scatter, units) << what;
      EXPECT_EQ(separate.lane_step.all_gather, 0) << what;
      EXPECT_EQ(separate.shard_group_step.all_gather, shared.shard_group_step.all_gather) << what;
      EXPECT_EQ(separate.lane_step.bytes_sent, shared.shard_group_step.bytes_sent -
                                                   separate.shard_group_step.bytes_sent)
          << what << ": the lane should send exactly the reduce-scatter bytes";
    }
  }
}

// In float64: AdamW turns the fp32 rounding of a different summation order
// into updates of up to lr on elements whose gradient nearly cancels, and
// which elements cross 1e-5 depends on the machine's BLAS kernels (see
// check_accumulation in test_grad_accumulation.cpp). In float64 the bound
// checks the lane's logic on any machine.
TEST(ReduceScatterLane, MatchesSingleProcessTraining) {
  at::manual_seed(54);
  const auto config = four_blocks();
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kBatch, config.context});
  models::GPT reference(config);
  models::GPT init(config);
  reference->to(at::kDouble);
  init->to(at::kDouble);
  copy_state(*init, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kAdamW, reference->parameters());
  const std::vector<double> ref_losses = train_steps(*ref_opt, kSteps, [&](int step) {
    return models::lm_loss(reference->forward(tokens[step]), tokens[step]);
  });
  run_ranks(3, [&](RankContext& ctx) {
    models::GPT local(config);
    local->to(at::kDouble);
    copy_state(*local, *init);
    auto model = fully_shard(
        local, FullyShardOptions(ctx.group).separate_reduce_scatter_group(true));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor loss = lm_train_step(model, *opt, local_rows(tokens[step], ctx.rank, ctx.world_size));
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[step]), kRtol) << "step " << step;
    }
    expect_shards_match(*model, *reference, kRtol, kAtol, "rank " + std::to_string(ctx.rank));
  });
}

TEST(ReduceScatterLane, DefaultsToTheShardGroupOnGlooAndIsNeverMadeForOneRank) {
  for (int ws : {1, 2}) {
    run_ranks(ws, [&](RankContext& ctx) {
      for (c10::optional<bool> lane : {c10::optional<bool>(), c10::optional<bool>(true)}) {
        auto model = fully_shard(Mlp(4, 8, 3, true), FullyShardOptions(ctx.group)
                                                                 .separate_reduce_scatter_group(lane));
        const bool want_sibling = lane.value_or(false) && ws > 1;
        for (const auto& info : unit_infos(*model)) {
          EXPECT_EQ(info.reduce_scatter_group != ctx.group, want_sibling)
              << "ws " << ws << " option " << (lane ? (*lane ? "on" : "off") : "default")
              << " unit '" << info.name << "'";
          EXPECT_EQ(info.reduce_scatter_group->global_ranks(), ctx.group->global_ranks());
        }
      }
    });
  }
}

TEST(ReduceScatterLane, HybridShardUsesASiblingOfEachShardGroup) {
  run_ranks(4, [&](RankContext& ctx) {
    const DeviceMesh mesh = make_hybrid_mesh(ctx.group, 2);
    auto model = fully_shard(Mlp(4, 8, 3, true), FullyShardOptions(mesh)
                                                     .strategy(ShardingStrategy::kHybridShard)
                                                     .separate_reduce_scatter_group(true));
    for (const auto& info : unit_infos(*model)) {
      EXPECT_NE(info.reduce_scatter_group, mesh.shard);
      EXPECT_EQ(info.reduce_scatter_group->global_ranks(), mesh.shard->global_ranks());
    }
    at::Tensor x = at::randn({4, 4});
    const CommCounters shard0 = mesh.shard->counters();
    model->forward(x).sum().backward();
    EXPECT_EQ((mesh.shard->counters() - shard0).reduce_scatter, 0)
        << "reduce-scatters belong on the lane";
  });
}

}  // namespace
}  // namespace fsdp::testing
