// Per-unit options (UnitModule::set_unit_options) and explicit backward
// prefetch lists: each override reaches its unit only, unset fields follow
// the root, and a choice that cannot apply is refused at wrap time, naming
// the unit.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int64_t kBatch = 4;

models::GPTConfig four_blocks() {
  auto config = tiny_gpt_config(true);
  config.n_layer = 4;
  return config;
}

// The block units of a sharded GPT, in forward order.
std::vector<UnitModule*> block_units(torch::nn::Module& model) {
  std::vector<UnitModule*> blocks;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* unit = dynamic_cast<UnitModule*>(m.get())) blocks.push_back(unit);
  }
  return blocks;
}

struct StepCounts {
  double loss = 0;
  int64_t backward_gathers = 0;
  int backward_peak_units = 0;  // units gathered at once during backward
  at::Tensor first_grad;        // rank 0's sharded gradient of the first parameter
};

// One training step at two ranks; `customize` edits the blocks before (or,
// for prefetch lists, after) fully_shard.
StepCounts one_step(const std::function<void(std::vector<UnitModule*>&)>& before_wrap,
                    const std::function<void(std::vector<UnitModule*>&)>& after_wrap,
                    int max_inflight = 2) {
  at::manual_seed(5);
  const auto config = four_blocks();
  at::Tensor tokens = at::randint(0, config.vocab_size, {kBatch, config.context});
  models::GPT init(config);
  StepCounts result;
  run_ranks(2, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *init);
    auto blocks = block_units(*local);
    if (before_wrap) before_wrap(blocks);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).max_inflight_all_gathers(max_inflight));
    if (after_wrap) after_wrap(blocks);
    at::Tensor x = local_rows(tokens, ctx.rank, ctx.world_size);
    at::Tensor loss = models::lm_loss(model->forward(x), x);
    reset_peak_memory_stats(*model);
    const auto before = ctx.group->counters();
    loss.backward();
    StepCounts mine;
    mine.backward_gathers = ctx.group->counters().all_gather - before.all_gather;
    mine.backward_peak_units = memory_stats(*model).peak_gathered_units;
    mine.loss = global_mean(*ctx.group, loss.item<double>());
    mine.first_grad = model->parameters()[0].grad().clone();
    if (ctx.rank == 0) result = mine;
  });
  return result;
}

TEST(UnitOptions, ReshardAfterForwardFalseKeepsOnlyThatUnitGathered) {
  const auto plain = one_step(nullptr, nullptr);
  const auto kept = one_step(
      [](auto& blocks) { blocks[1]->set_unit_options(UnitOptions().reshard_after_forward(false)); },
      nullptr);
  EXPECT_EQ(plain.backward_gathers, four_blocks().n_layer);
  EXPECT_EQ(kept.backward_gathers, four_blocks().n_layer - 1);
  EXPECT_EQ(kept.loss, plain.loss);
  EXPECT_TRUE(at::equal(kept.first_grad, plain.first_grad));
}

TEST(UnitOptions, MixedPrecisionReachesOnlyItsUnitAndUnsetFieldsFollowTheRoot) {
  const auto config = four_blocks();
  run_ranks(2, [&](RankContext& ctx) {
    models::GPT local(config);
    auto blocks = block_units(*local);
    blocks[2]->set_unit_options(
        UnitOptions().mp(MixedPrecisionPolicy().param_dtype(at::kBFloat16)));
    auto model = fully_shard(local, FullyShardOptions(ctx.group)
                                        .mp(MixedPrecisionPolicy().reduce_dtype(at::kDouble)));
    for (const auto& info : unit_infos(*model)) {
      const bool overridden = info.name == "blocks.2";
      EXPECT_EQ(info.compute_dtype, overridden ? at::kBFloat16 : at::kFloat) << info.name;
      // The override replaces the whole policy, so its reduce dtype follows
      // its own param dtype; the others keep the root's.
      EXPECT_EQ(info.reduce_dtype, overridden ? at::kBFloat16 : at::kDouble) << info.name;
    }
  });
}

TEST(UnitOptions, GroupSizeForAStrategyThatNeverReshardsIsRefusedNamingTheUnit) {
  run_ranks(2, [&](RankContext& ctx) {
    models::GPT local(four_blocks());
    block_units(*local)[0]->set_unit_options(UnitOptions().reshard_after_forward_group_size(2));
    EXPECT_THROWS_WITH(
        fully_shard(local, FullyShardOptions(ctx.group).strategy(
                               ShardingStrategy::kShardGradOp)),
        "the UnitOptions of unit 'blocks.0': reshard_after_forward_group_size(2) has no effect "
        "with strategy SHARD_GRAD_OP");
  });
}

TEST(UnitOptions, GroupSizeThatDoesNotDivideTheShardGroupIsRefusedNamingTheUnit) {
  run_ranks(2, [&](RankContext& ctx) {
    models::GPT local(four_blocks());
    block_units(*local)[3]->set_unit_options(UnitOptions().reshard_after_forward_group_size(3));
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)),
                       "reshard_after_forward_group_size is 3 for unit 'blocks.3', which does not "
                       "divide the shard group size 2");
  });
}

TEST(UnitOptions, ConflictingReshardChoicesAreRefused) {
  run_ranks(1, [&](RankContext& ctx) {
    models::GPT local(four_blocks());
    block_units(*local)[1]->set_unit_options(
        UnitOptions().reshard_after_forward(false).reshard_after_forward_group_size(2));
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)),
                       "the UnitOptions of unit 'blocks.1': reshard_after_forward is false but "
                       "reshard_after_forward_group_size is 2");
  });
}

TEST(BackwardPrefetch, ExplicitListIsIssuedAtOnceAndLeavesGradientsUnchanged) {
  const int limit = 4;
  const auto recorded = one_step(nullptr, nullptr, limit);
  const auto listed = one_step(nullptr,
                               [](auto& blocks) {
                                 // The last block runs first in backward.
                                 blocks[3]->set_backward_prefetch({blocks[2], blocks[1], blocks[0]});
                               },
                               limit);
  // The root stays gathered through backward. With the recorded order each
  // block prefetches the next one; the list gathers all the others at once.
  EXPECT_EQ(recorded.backward_peak_units, 3);
  EXPECT_EQ(listed.backward_peak_units, 1 + four_blocks().n_layer);
  EXPECT_EQ(listed.backward_gathers, recorded.backward_gathers);
  EXPECT_TRUE(at::equal(listed.first_grad, recorded.first_grad));
}

}  // namespace
}  // namespace fsdp::testing
