// HYBRID_SHARD and HYBRID_SHARD_ZERO2 on a 2x2 mesh: parity with one process
// on the same global batch, and the collectives each group of the mesh runs.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 8;

class HybridShard : public ::testing::TestWithParam<ShardingStrategy> {};

TEST_P(HybridShard, MatchesSingleProcessAndCountsPerGroup) {
  const ShardingStrategy strategy = GetParam();
  const bool zero2 = strategy == ShardingStrategy::kHybridShardZero2;
  at::manual_seed(21);
  at::Tensor inputs = at::randn({kSteps, kGlobalBatch, 7});
  at::Tensor targets = at::randn({kSteps, kGlobalBatch, 3});
  Mlp reference(7, 10, 3, /*units=*/true);
  Mlp initial(7, 10, 3, true);
  copy_state(*initial, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kAdamW, reference->parameters());
  const std::vector<double> ref_losses = train_steps(*ref_opt, kSteps, [&](int step) {
    return at::mse_loss(reference->forward(inputs[step]), targets[step]);
  });

  run_ranks(4, [&](RankContext& ctx) {
    const DeviceMesh mesh = make_hybrid_mesh(ctx.group, 2);
    ASSERT_EQ(mesh.shard->size(), 2);
    ASSERT_EQ(mesh.replicate->size(), 2);
    Mlp local(7, 10, 3, true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(mesh).strategy(strategy));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      const CommCounters shard0 = mesh.shard->counters();
      const CommCounters replicate0 = mesh.replicate->counters();
      at::Tensor x = local_rows(inputs[step], ctx.rank, 4);
      at::Tensor y = local_rows(targets[step], ctx.rank, 4);
      at::Tensor loss = at::mse_loss(model->forward(x), y);
      opt->zero_grad();
      loss.backward();
      opt->step();
      const CommCounters shard = mesh.shard->counters() - shard0;
      const CommCounters replicate = mesh.replicate->counters() - replicate0;
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[step]), 1e-5)
          << "rank " << ctx.rank << " step " << step;
      // 3 units (root + 2 Linear): forward gathers all 3; backward re-gathers
      // the 2 nested ones unless ZeRO-2 kept them; one reduce-scatter per
      // unit in the shard group, one all-reduce per unit across replicas.
      const std::string where = "rank " + std::to_string(ctx.rank) + " step " + std::to_string(step);
      EXPECT_EQ(shard.all_gather, zero2 ? 3 : 5) << where;
      EXPECT_EQ(shard.reduce_scatter, 3) << where;
      EXPECT_EQ(shard.all_reduce, 0) << where;
      EXPECT_EQ(replicate.all_gather, 0) << where;
      EXPECT_EQ(replicate.reduce_scatter, 0) << where;
      EXPECT_EQ(replicate.all_reduce, 3) << where;
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-5, "rank " + std::to_string(ctx.rank));
    // Each shard is half of the model: the shard group has 2 ranks.
    for (const auto& info : unit_infos(*model)) EXPECT_EQ(info.padded_numel, 2 * info.shard_numel);
  });
}

INSTANTIATE_TEST_SUITE_P(Mesh2x2, HybridShard,
                         ::testing::Values(ShardingStrategy::kHybridShard,
                                           ShardingStrategy::kHybridShardZero2),
                         [](const auto& info) { return std::string(to_string(info.param)); });

void set_launch_env(const char* local_world_size) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", local_world_size, 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
}

TEST(HybridMeshFromEnv, ShardsWithinANode) {
  set_launch_env("2");  // read before the threads start; every rank sees the same
  run_ranks(4, [](RankContext& ctx) {
    DeviceMesh mesh = make_hybrid_mesh_from_env(ctx.group);
    EXPECT_EQ(mesh.shard->size(), 2);
    EXPECT_EQ(mesh.replicate->size(), 2);
    EXPECT_EQ(mesh.shard->global_ranks()[0], ctx.rank / 2 * 2);
    EXPECT_EQ(mesh.replicate->global_ranks()[0], ctx.rank % 2);
  });
}

TEST(HybridMeshFromEnv, LocalWorldSizeMustDivideTheWorld) {
  set_launch_env("3");
  run_ranks(4, [](RankContext& ctx) {
    EXPECT_THROWS_WITH(make_hybrid_mesh_from_env(ctx.group),
                       "3 ranks per node (local world size from torchrun) do not divide the "
                       "world size 4");
  });
}

TEST(HybridShardOptions, DefaultMeshShardsWithinANode) {
  set_launch_env("2");
  run_ranks(4, [](RankContext& ctx) {
    auto model = fully_shard(Mlp(7, 10, 3, true), FullyShardOptions(ctx.group)
                                                      .strategy(ShardingStrategy::kHybridShard));
    for (const auto& info : unit_infos(*model)) EXPECT_EQ(info.padded_numel, 2 * info.shard_numel);
  });
}

TEST(HybridShardOptions, AMeshInTheConstructorAlsoGivesTheWorldGroup) {
  run_ranks(4, [](RankContext& ctx) {
    const DeviceMesh mesh = make_hybrid_mesh(ctx.group, 2);
    const FullyShardOptions options(mesh);
    EXPECT_EQ(options.process_group(), ctx.group);
    ASSERT_NE(options.mesh(), nullptr);
    EXPECT_EQ(options.mesh()->shard, mesh.shard);
    EXPECT_EQ(options.mesh()->replicate, mesh.replicate);
    // A group converts to the options, so fully_shard(model, group) works.
    auto model = fully_shard(Mlp(7, 10, 3, true), ctx.group);
    EXPECT_TRUE(model->is_sharded());
  });
}

TEST(HybridShardOptions, WithoutMeshOrLauncherEnvTheErrorSaysWhatToPass) {
  for (const char* var : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                          "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    unsetenv(var);
  }
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group).strategy(
                                              ShardingStrategy::kHybridShard)),
                       "HYBRID_SHARD without a mesh shards within each node, which needs the "
                       "launcher's environment (LOCAL_WORLD_SIZE)");
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions().strategy(ShardingStrategy::kHybridShard)),
                       "HYBRID_SHARD needs a 2-D mesh");
  });
}

}  // namespace
}  // namespace fsdp::testing
