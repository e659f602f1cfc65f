// Ignored modules and parameters stay whole on every rank and out of FSDP's
// collectives; the user keeps them in sync. Parity holds when the test
// all-reduces their gradients by hand.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <unordered_set>

#include "fsdp/checkpoint/training_state.h"
#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"
#include "harness/temp_dir.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 4;
constexpr int kWorld = 2;

FullyShardOptions ignoring_last_linear_and_scale(Mlp& local, const ProcessGroupPtr& group) {
  return FullyShardOptions(group)
      .ignored_modules({local->layers->ptr(4)})
      .ignored_params({local->scale});
}

// One AdamW step on this rank's rows of `x`, the user averaging the ignored
// gradients.
void train_one_step(RankContext& ctx, UnitModule& model, torch::optim::Optimizer& opt,
                    const at::Tensor& x, int world) {
  auto* root = dynamic_cast<ShardedImpl<MlpImpl>*>(&model);
  at::Tensor loss = root->forward(local_rows(x, ctx.rank, world)).pow(2).mean();
  opt.zero_grad();
  loss.backward();
  for (const auto& p : model.named_parameters()) {
    if (p.key() != "scale" && p.key().rfind("layers.4.", 0) != 0) continue;
    ctx.group->all_reduce(p.value().mutable_grad(), ReduceOp::kSum)->wait();
    p.value().mutable_grad().div_(world);
  }
  opt.step();
}

TEST(IgnoredParams, ParityWhenTheUserAllReducesTheirGradients) {
  at::manual_seed(51);
  at::Tensor inputs = at::randn({kSteps, 8, 7});
  at::Tensor targets = at::randn({kSteps, 8, 3});
  Mlp reference(7, 10, 3, true);
  Mlp initial(7, 10, 3, true);
  copy_state(*initial, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kAdamW, reference->parameters());
  std::vector<double> ref_losses, ref_norms;
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor loss = at::mse_loss(reference->forward(inputs[step]), targets[step]);
    ref_opt->zero_grad();
    loss.backward();
    double sum_sq = 0;
    for (const auto& p : reference->parameters()) sum_sq += p.grad().pow(2).sum().item<double>();
    ref_norms.push_back(std::sqrt(sum_sq));
    ref_opt->step();
    ref_losses.push_back(loss.item<double>());
  }
  const std::unordered_set<std::string> ignored_names{"layers.4.weight", "layers.4.bias", "scale"};

  run_ranks(kWorld, [&](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, ignoring_last_linear_and_scale(local, ctx.group));
    std::vector<at::Tensor> ignored;
    for (const auto& p : model->named_parameters()) {
      if (ignored_names.count(p.key())) ignored.push_back(p.value());
    }
    ASSERT_EQ(ignored.size(), 3u);
    for (const auto& shard : param_shards(*model)) {
      EXPECT_EQ(shard.ignored, ignored_names.count(shard.name) == 1) << shard.name;
      if (!shard.ignored) continue;  // listed whole, written by rank 0 only
      EXPECT_EQ(shard.flat_begin, 0) << shard.name;
      EXPECT_EQ(shard.numel, shard.param.numel()) << shard.name;
      EXPECT_EQ(shard.primary, ctx.rank == 0) << shard.name;
    }
    EXPECT_EQ(local->layers->ptr(4)->named_parameters()["weight"].sizes().vec(),
              (std::vector<int64_t>{3, 10}));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor loss = at::mse_loss(model->forward(local_rows(inputs[step], ctx.rank, kWorld)),
                                     local_rows(targets[step], ctx.rank, kWorld));
      opt->zero_grad();
      const CommCounters before = ctx.group->counters();
      loss.backward();
      const CommCounters after = ctx.group->counters();
      // Only the 3 units reduce (root: shift; 2 nested Linear); nothing for
      // the ignored parameters.
      EXPECT_EQ(after.reduce_scatter - before.reduce_scatter, 3);
      EXPECT_EQ(after.all_reduce - before.all_reduce, 0);
      for (auto& p : ignored) {  // the user's job: average the ignored gradients
        ctx.group->all_reduce(p.mutable_grad(), ReduceOp::kSum)->wait();
        p.mutable_grad().div_(kWorld);
      }
      // clip_grad_norm_ counts the ignored (replicated) gradients once.
      const double norm = clip_grad_norm_(*model, /*max_norm=*/1e9);
      EXPECT_LE(relative_diff(norm, ref_norms[step]), 1e-5) << "rank " << ctx.rank << " step " << step;
      opt->step();
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[step]), 1e-5) << "rank " << ctx.rank << " step " << step;
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-5, "rank " + std::to_string(ctx.rank));
    const auto ref = reference->named_parameters();
    for (const auto& p : model->named_parameters()) {
      if (!ignored_names.count(p.key())) continue;
      EXPECT_TRUE(at::allclose(p.value(), ref[p.key()], 1e-5, 1e-5)) << p.key() << " on rank " << ctx.rank;
    }
  });
}

// Ignored parameters are part of the model's state: full state dicts, the
// optimizer's, and checkpoints hold them under their names, and loading at
// another world size restores them on every rank.
TEST(IgnoredParams, StateDictsAndCheckpointsKeepThem) {
  at::manual_seed(53);
  Mlp initial(7, 10, 3, true);
  const at::Tensor x = at::randn({6, 7});  // drawn here: rank threads share the generator
  TempDir dir("fsdp-ignored");
  const std::string checkpoint = dir / "step1";
  StateDict saved;           // rank 0's full state dict after one step
  OptimStateDict saved_opt;  // and its optimizer's
  run_ranks(2, [&](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, ignoring_last_linear_and_scale(local, ctx.group));
    const StateDict before = full_state_dict(*model);
    if (ctx.rank == 0) {
      for (const auto& p : initial->named_parameters()) {
        ASSERT_NE(before.find(p.key()), nullptr) << p.key() << " is missing from full_state_dict";
        EXPECT_TRUE(before[p.key()].equal(p.value())) << p.key();
      }
    }
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    train_one_step(ctx, *model, *opt, x, 2);
    ckpt::save_training_state(*ctx.group, checkpoint, *model, opt.get(), {});
    StateDict after = full_state_dict(*model);
    OptimStateDict after_opt = full_optim_state_dict(*model, *opt);
    if (ctx.rank == 0) {
      for (const char* name : {"scale", "layers.4.weight", "layers.4.bias"}) {
        ASSERT_EQ(after_opt.count(name), 1u) << name << " is missing from full_optim_state_dict";
        EXPECT_EQ(after_opt[name].step, 1) << name;
        EXPECT_EQ(after_opt[name].tensors.at("exp_avg").sizes(), after[name].sizes()) << name;
        EXPECT_FALSE(after[name].equal(before[name])) << name << " did not train";
      }
      saved = std::move(after);
      saved_opt = std::move(after_opt);
    }
  });

  run_ranks(3, [&](RankContext& ctx) {
    at::manual_seed(54 + ctx.rank);  // other values on every rank
    Mlp local(7, 10, 3, true);
    auto model = fully_shard(local, ignoring_last_linear_and_scale(local, ctx.group));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    ckpt::load_training_state(*ctx.group, checkpoint, *model, opt.get());
    const auto params = local->named_parameters();
    for (const char* name : {"scale", "layers.4.weight", "layers.4.bias"}) {
      EXPECT_TRUE(params[name].equal(saved[name])) << name << " on rank " << ctx.rank;
    }
    const StateDict loaded = full_state_dict(*model);
    const OptimStateDict loaded_opt = full_optim_state_dict(*model, *opt);
    if (ctx.rank == 0) {
      ASSERT_EQ(loaded.size(), saved.size());
      for (const auto& item : saved) {
        EXPECT_TRUE(loaded[item.key()].equal(item.value())) << item.key();
        for (const auto& field : saved_opt[item.key()].tensors) {
          EXPECT_TRUE(loaded_opt.at(item.key()).tensors.at(field.first).equal(field.second))
              << item.key() << "/" << field.first;
        }
      }
    }
    // A plain model's state dict names the ignored parameters too: it loads
    // strictly, and every rank gets their values.
    StateDict plain;
    for (const auto& p : initial->named_parameters()) plain.insert(p.key(), p.value());
    load_full_state_dict(*model, plain, LoadStateDictOptions().rank0_only(true));
    for (const char* name : {"scale", "layers.4.weight", "layers.4.bias"}) {
      EXPECT_TRUE(params[name].equal(initial->named_parameters()[name])) << name << " on rank " << ctx.rank;
    }
  });
}

TEST(IgnoredParams, ErrorsNameTheFix) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)
                                              .ignored_params({at::Tensor()})),
                       "ignored_params[0] is an undefined tensor");
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)
                                              .ignored_modules({local.ptr()})),
                       "the root module is in ignored_modules");
  });
}

}  // namespace
}  // namespace fsdp::testing
