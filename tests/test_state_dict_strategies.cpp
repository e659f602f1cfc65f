// State dicts and checkpoints under every shard layout: replicated across a
// hybrid mesh, not sharded at all, sharded with gradients only, offloaded to
// the host. Whatever the layout, the full state dict and the optimizer's
// equal the single-process run, the ranks' primary ranges cover every
// element exactly once (so a checkpoint writes each once), and a checkpoint
// loads bitwise into a plain FULL_SHARD model at another world size.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "fsdp/checkpoint/training_state.h"
#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"
#include "harness/temp_dir.h"
#include "state_dict/optimizer_fields.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 12;

struct LayoutCase {
  std::string name;
  int world_size;
  ShardingStrategy strategy;
  bool offload;
};

std::string case_name(const ::testing::TestParamInfo<LayoutCase>& info) { return info.param.name; }

// ctest lists each case with its parameter: print it as the case name.
void PrintTo(const LayoutCase& c, std::ostream* os) { *os << case_name({c, 0}); }

FullyShardOptions options_for(const LayoutCase& c, const ProcessGroupPtr& world) {
  auto options = FullyShardOptions().strategy(c.strategy).offload(OffloadPolicy().offload_params(c.offload));
  if (c.strategy == ShardingStrategy::kHybridShard || c.strategy == ShardingStrategy::kHybridShardZero2) {
    return options.mesh(make_hybrid_mesh(world, 2));
  }
  return options.process_group(world);
}

// The single-process run every layout is compared with.
struct Reference {
  Mlp model{7, 10, 3, true};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

void train_reference(Reference& ref, const Mlp& initial, const at::Tensor& inputs,
                     const at::Tensor& targets) {
  copy_state(*ref.model, *initial);
  ref.optimizer = make_optimizer(OptimizerKind::kSgdMomentum, ref.model->parameters());
  for (int step = 0; step < kSteps; ++step) {
    ref.optimizer->zero_grad();
    at::mse_loss(ref.model->forward(inputs[step]), targets[step]).backward();
    ref.optimizer->step();
  }
}

// The full state dict and the optimizer's equal the reference's.
void expect_full_dicts_match(const Reference& ref, const StateDict& full,
                             const OptimStateDict& optim, const std::string& who) {
  for (const auto& p : ref.model->named_parameters()) {
    ASSERT_NE(full.find(p.key()), nullptr) << who << ": " << p.key();
    EXPECT_TRUE(at::allclose(full[p.key()], p.value(), 1e-5, 1e-6)) << who << ": " << p.key();
    detail::OptimizerFields expected;
    ASSERT_TRUE(detail::read_optimizer_state(*ref.optimizer, p.value(), &expected));
    EXPECT_TRUE(at::allclose(optim.at(p.key()).tensors.at("momentum_buffer"),
                             expected.tensors.at("momentum_buffer"), 1e-5, 1e-6))
        << who << ": " << p.key();
  }
}

// Each element is some rank's primary range exactly once. Collective.
void expect_primary_ranges_cover_once(RankContext& ctx, const UnitModule& model,
                                      int64_t total_numel, const std::string& who) {
  const auto params = model.named_parameters();
  int64_t primary = 0;
  for (const auto& item : sharded_state_dict(model)) {
    if (item.value().primary && params.find(item.key())) primary += item.value().local.numel();
  }
  at::Tensor count = at::full({1}, static_cast<double>(primary), at::kDouble);
  ctx.group->all_reduce(count, ReduceOp::kSum)->wait();
  EXPECT_EQ(count.item<double>(), static_cast<double>(total_numel)) << who;
}

// The checkpoint loads bitwise into a plain FULL_SHARD model on `world_size`
// ranks, seeded differently so that nothing matches by chance.
void expect_reload_bitwise(const std::string& checkpoint, int world_size, const StateDict& saved,
                           const OptimStateDict& saved_optim, const std::string& name) {
  run_ranks(world_size, [&](RankContext& ctx) {
    at::manual_seed(42 + ctx.rank);
    Mlp local(7, 10, 3, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    ckpt::load_training_state(*ctx.group, checkpoint, *model, opt.get());
    const StateDict loaded = full_state_dict(*model);
    const OptimStateDict loaded_optim = full_optim_state_dict(*model, *opt);
    if (ctx.rank != 0) return;
    ASSERT_EQ(loaded.size(), saved.size());
    for (const auto& item : saved) {
      EXPECT_TRUE(loaded[item.key()].equal(item.value())) << name << ": " << item.key();
      EXPECT_TRUE(loaded_optim.at(item.key()).tensors.at("momentum_buffer")
                      .equal(saved_optim.at(item.key()).tensors.at("momentum_buffer")))
          << name << ": " << item.key();
    }
  });
}

class StateDictLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(StateDictLayouts, FullDictsPrimaryRangesAndCheckpointReload) {
  const LayoutCase& c = GetParam();
  at::manual_seed(41);
  at::Tensor inputs = at::randn({kSteps, kGlobalBatch, 7});
  at::Tensor targets = at::randn({kSteps, kGlobalBatch, 3});
  Reference reference;
  Mlp initial(7, 10, 3, true);
  train_reference(reference, initial, inputs, targets);
  int64_t total_numel = 0;
  for (const auto& p : reference.model->parameters()) total_numel += p.numel();

  TempDir dir("fsdp-layouts");
  const std::string checkpoint = dir / "ckpt";
  StateDict saved;
  OptimStateDict saved_optim;
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const std::string who = c.name + ", rank " + std::to_string(ctx.rank);
    Mlp local(7, 10, 3, true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, options_for(c, ctx.group));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      opt->zero_grad();
      at::mse_loss(model->forward(local_rows(inputs[step], ctx.rank, c.world_size)),
                   local_rows(targets[step], ctx.rank, c.world_size))
          .backward();
      opt->step();
    }
    StateDict full = full_state_dict(*model);
    OptimStateDict optim = full_optim_state_dict(*model, *opt);
    if (ctx.rank == 0) {
      expect_full_dicts_match(reference, full, optim, who);
      saved = std::move(full);
      saved_optim = std::move(optim);
    }
    expect_primary_ranges_cover_once(ctx, *model, total_numel, who);
    ckpt::save_training_state(*ctx.group, checkpoint, *model, opt.get());
  });
  expect_reload_bitwise(checkpoint, c.world_size == 2 ? 3 : 2, saved, saved_optim, c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, StateDictLayouts,
    ::testing::Values(LayoutCase{"hybrid_2x2", 4, ShardingStrategy::kHybridShard, false},
                      LayoutCase{"hybrid_zero2_2x2", 4, ShardingStrategy::kHybridShardZero2, false},
                      LayoutCase{"no_shard_ws3", 3, ShardingStrategy::kNoShard, false},
                      LayoutCase{"shard_grad_op_ws3", 3, ShardingStrategy::kShardGradOp, false},
                      LayoutCase{"full_shard_offload_ws2", 2, ShardingStrategy::kFullShard, true}),
    case_name);

}  // namespace
}  // namespace fsdp::testing
