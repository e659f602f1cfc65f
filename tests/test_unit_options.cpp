// Per-unit options (UnitModule::set_unit_options) and explicit backward
// prefetch lists: each override reaches its unit only, unset fields follow
// the root, and a choice that cannot apply is refused at wrap time, naming
// the unit. keep_params_whole is proven against one process with an
// optimizer that needs whole matrices.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/checkpoint/training_state.h"
#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"
#include "harness/temp_dir.h"

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

// -- keep_params_whole ------------------------------------------------------

// The orthogonalization Muon applies to each weight matrix's gradient:
// Newton-Schulz iterations of a quintic that drive every singular value of
// G / |G| towards 1 (coefficients from Muon's write-up). It needs the whole
// matrix: a slice of it has other singular vectors.
at::Tensor orthogonalized(const at::Tensor& grad) {
  const bool tall = grad.size(0) > grad.size(1);
  at::Tensor x = (tall ? grad.t() : grad) / (grad.norm() + 1e-7);
  for (int i = 0; i < 5; ++i) {
    const at::Tensor a = at::mm(x, x.t());
    x = 3.4445 * x + at::mm(-4.7750 * a + 2.0315 * at::mm(a, a), x);
  }
  return tall ? x.t() : x;
}

// One step: each 2-D weight of a block moves along its orthogonalized
// gradient, every other parameter along its gradient. `params` pairs each
// parameter with whether it is such a weight.
void orthogonalized_step(const std::vector<std::pair<at::Tensor, bool>>& params) {
  constexpr double kLr = 0.02;
  at::NoGradGuard no_grad;
  for (const auto& [param, is_matrix] : params) {
    const at::Tensor& grad = param.grad();
    if (!grad.defined() || param.numel() == 0) continue;
    ASSERT_EQ(grad.sizes(), param.sizes());
    param.sub_(is_matrix ? orthogonalized(grad) : grad, kLr);
  }
}

bool is_block_matrix(const std::string& name, int64_t dims) {
  return dims == 2 && name.rfind("blocks.", 0) == 0;
}

constexpr int kWholeSteps = 3;

// The blocks keep their parameters whole; the root is split evenly. Every
// rank holds a GPT in float64, so one-process and sharded runs agree to
// rounding.
void keep_blocks_whole(torch::nn::Module& model) {
  for (auto* block : block_units(model))
    block->set_unit_options(UnitOptions().keep_params_whole(true));
}

TEST(KeepParamsWhole, EachMatrixIsWholeOnOneRankAndNewtonSchulzMatchesOneProcess) {
  at::manual_seed(17);
  const auto config = four_blocks();
  const at::Tensor tokens = at::randint(0, config.vocab_size, {kBatch, config.context});
  models::GPT reference(config);
  reference->to(at::kDouble);
  models::GPT initial(config);
  initial->to(at::kDouble);
  copy_state(*initial, *reference);
  std::vector<std::pair<at::Tensor, bool>> ref_params;
  for (const auto& p : reference->named_parameters()) {
    ref_params.emplace_back(p.value(), is_block_matrix(p.key(), p.value().dim()));
  }
  std::vector<double> ref_losses;
  for (int step = 0; step < kWholeSteps; ++step) {
    reference->zero_grad();
    at::Tensor loss = models::lm_loss(reference->forward(tokens), tokens);
    loss.backward();
    ref_losses.push_back(loss.item<double>());
    orthogonalized_step(ref_params);
  }
  std::vector<std::set<std::string>> owned(2);  // each rank's whole matrices
  run_ranks(2, [&](RankContext& ctx) {
    models::GPT local(config);
    local->to(at::kDouble);
    copy_state(*local, *initial);
    keep_blocks_whole(*local);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    std::vector<std::pair<at::Tensor, bool>> params;
    for (const auto& shard : param_shards(*model)) {
      const bool is_matrix =
          is_block_matrix(shard.name, static_cast<int64_t>(shard.full_shape.size()));
      params.emplace_back(shard.param, is_matrix);
      if (!is_matrix || shard.numel == 0) continue;
      EXPECT_EQ(shard.param.sizes().vec(), shard.full_shape)
          << shard.name << " on rank " << ctx.rank;
      owned[static_cast<size_t>(ctx.rank)].insert(shard.name);
    }
    const std::string where = "rank " + std::to_string(ctx.rank);
    for (int step = 0; step < kWholeSteps; ++step) {
      model->zero_grad();
      const at::Tensor x = local_rows(tokens, ctx.rank, ctx.world_size);
      at::Tensor loss = models::lm_loss(model->forward(x), x);
      loss.backward();
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[static_cast<size_t>(step)]), 1e-12)
          << where << " step " << step;
      orthogonalized_step(params);
    }
    expect_shards_match(*model, *reference, 1e-10, 1e-12, where);
  });
  // Every block matrix has exactly one owner, and both ranks own some.
  std::set<std::string> matrices;
  for (const auto& p : reference->named_parameters()) {
    if (is_block_matrix(p.key(), p.value().dim())) matrices.insert(p.key());
  }
  std::set<std::string> both = owned[0];
  both.insert(owned[1].begin(), owned[1].end());
  EXPECT_EQ(both, matrices);
  EXPECT_EQ(owned[0].size() + owned[1].size(), matrices.size());
  EXPECT_FALSE(owned[0].empty());
  EXPECT_FALSE(owned[1].empty());
}

// A checkpoint holds parameters by name and range, whatever the placement:
// saved whole at two ranks, it loads split evenly at three.
TEST(KeepParamsWhole, CheckpointSavedWholeLoadsSplitAtAnotherWorldSize) {
  at::manual_seed(19);
  const auto config = four_blocks();
  const at::Tensor tokens = at::randint(0, config.vocab_size, {kBatch, config.context});
  models::GPT initial(config);
  TempDir dir("fsdp-whole");
  const std::string checkpoint = dir / "step1";
  StateDict saved;
  OptimStateDict saved_opt;
  run_ranks(2, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *initial);
    keep_blocks_whole(*local);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    const at::Tensor x = local_rows(tokens, ctx.rank, ctx.world_size);
    models::lm_loss(model->forward(x), x).backward();
    opt->step();
    ckpt::save_training_state(*ctx.group, checkpoint, *model, opt.get(), {});
    StateDict state = full_state_dict(*model);
    OptimStateDict opt_state = full_optim_state_dict(*model, *opt);
    if (ctx.rank == 0) {
      saved = std::move(state);
      saved_opt = std::move(opt_state);
    }
  });
  ASSERT_EQ(saved.size(), initial->named_parameters().size() + initial->named_buffers().size());
  run_ranks(3, [&](RankContext& ctx) {
    models::GPT local(config);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    ckpt::load_training_state(*ctx.group, checkpoint, *model, opt.get());
    const StateDict loaded = full_state_dict(*model);
    const OptimStateDict loaded_opt = full_optim_state_dict(*model, *opt);
    if (ctx.rank != 0) return;
    for (const auto& item : saved)
      EXPECT_TRUE(loaded[item.key()].equal(item.value())) << item.key();
    ASSERT_EQ(saved_opt.size(), initial->named_parameters().size());
    for (const auto& [name, state] : saved_opt) {
      for (const auto& [field, value] : state.tensors) {
        EXPECT_TRUE(loaded_opt.at(name).tensors.at(field).equal(value)) << name << "/" << field;
      }
    }
  });
}

TEST(KeepParamsWhole, IsRefusedUnderNoShardNamingTheUnit) {
  run_ranks(2, [&](RankContext& ctx) {
    models::GPT local(four_blocks());
    block_units(*local)[1]->set_unit_options(UnitOptions().keep_params_whole(true));
    EXPECT_THROWS_WITH(
        fully_shard(local, FullyShardOptions(ctx.group).strategy(ShardingStrategy::kNoShard)),
        "the UnitOptions of unit 'blocks.1': keep_params_whole has no effect with strategy "
        "NO_SHARD, where every rank holds every parameter whole");
  });
}

}  // namespace
}  // namespace fsdp::testing
