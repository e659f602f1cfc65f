// fsdp::clip_grad_norm_ across shards against torch::nn::utils::clip_grad_norm_
// on the reference model's full gradients: the returned total norm matches
// (1e-5 relative), and training with clipping matches step for step. The
// max norm is small enough that every step clips (asserted on the reference).

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>

#include <cmath>
#include <limits>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 12;
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

struct ClipCase {
  std::string model;
  int world_size;
  double norm_type;
  ShardingStrategy strategy;
  OptimizerKind optimizer;
};

std::string norm_name(double p) {
  if (std::isinf(p)) return "inf";
  return std::to_string(static_cast<int>(p));
}

std::string case_name(const ::testing::TestParamInfo<ClipCase>& info) {
  const auto& c = info.param;
  return c.model + "_ws" + std::to_string(c.world_size) + "_norm" + norm_name(c.norm_type) + "_" +
         to_string(c.strategy) + "_" + to_string(c.optimizer);
}

// ctest lists each case with its parameter: print it as the case name.
void PrintTo(const ClipCase& c, std::ostream* os) { *os << case_name({c, 0}); }

// Small enough to clip every step for these models and losses.
double max_norm_for(const ClipCase& c) {
  if (std::isinf(c.norm_type)) return 0.005;
  return 0.05;
}

template <class Holder, class MakeModel, class LossFn>
void check_clipping(const ClipCase& c, MakeModel make_model, const at::Tensor& inputs,
                    const at::Tensor& targets, LossFn loss_fn) {
  const double max_norm = max_norm_for(c);
  at::manual_seed(8);
  Holder reference = make_model(false);
  Holder initial = make_model(true);
  copy_state(*initial, *reference);

  auto ref_opt = make_optimizer(c.optimizer, reference->parameters());
  std::vector<double> ref_losses, ref_norms;
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor loss = loss_fn(reference->forward(inputs[step]), targets[step]);
    ref_opt->zero_grad();
    loss.backward();
    const double norm =
        torch::nn::utils::clip_grad_norm_(reference->parameters(), max_norm, c.norm_type);
    ASSERT_GT(norm, 2 * max_norm) << "step " << step << ": the reference must clip";
    ref_opt->step();
    ref_losses.push_back(loss.item<double>());
    ref_norms.push_back(norm);
  }

  run_ranks(c.world_size, [&](RankContext& ctx) {
    Holder local = make_model(true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
    auto opt = make_optimizer(c.optimizer, model->parameters());
    const std::string who = "rank " + std::to_string(ctx.rank);
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(inputs[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
      at::Tensor loss = loss_fn(model->forward(x), y);
      opt->zero_grad();
      loss.backward();
      const double norm = clip_grad_norm_(*model, max_norm, c.norm_type);
      EXPECT_LE(relative_diff(norm, ref_norms[step]), kRtol)
          << who << " step " << step << ": total norm " << norm << " vs reference "
          << ref_norms[step];
      // After clipping, the full gradients' norm is max_norm: the local
      // shards' norms combine to it (read with a max norm that cannot clip).
      const double after = clip_grad_norm_(*model, 1e9, c.norm_type);
      EXPECT_LE(relative_diff(after, max_norm), 1e-4) << who << " step " << step;
      opt->step();
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[step]), kRtol)
          << who << " step " << step << ": loss " << global << " vs reference " << ref_losses[step];
    }
    expect_shards_match(*model, *reference, kRtol, kAtol, who);
  });
}

class ClipGradNorm : public ::testing::TestWithParam<ClipCase> {};

TEST_P(ClipGradNorm, MatchesTorchClipOnTheFullGradients) {
  const ClipCase& c = GetParam();
  at::manual_seed(13);
  with_parity_model(c.model, {kSteps, kGlobalBatch}, [&](auto make_model, auto... data) {
    check_clipping<decltype(make_model(true))>(c, make_model, data...);
  });
}

std::vector<ClipCase> clip_cases() {
  std::vector<ClipCase> cases;
  for (int ws : {1, 2, 3, 4}) {
    for (double p : {2.0, static_cast<double>(INFINITY), 3.0}) {
      cases.push_back({"gpt", ws, p, ShardingStrategy::kFullShard, OptimizerKind::kSgdMomentum});
    }
  }
  for (double p : {2.0, static_cast<double>(INFINITY), 3.0}) {
    cases.push_back({"mlp", 3, p, ShardingStrategy::kFullShard, OptimizerKind::kAdamW});
  }
  // Replicated strategies: the norm must not count a replica twice.
  for (auto s : {ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
    cases.push_back({"gpt", 2, 2.0, s, OptimizerKind::kAdamW});
    cases.push_back({"mlp", 3, 3.0, s, OptimizerKind::kSgdMomentum});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Core, ClipGradNorm, ::testing::ValuesIn(clip_cases()), case_name);

// A max norm above the total leaves the gradients untouched.
TEST(ClipGradNormNoClip, LargeMaxNormLeavesGradientsAlone) {
  run_ranks(2, [](RankContext& ctx) {
    // The ranks' draws may interleave: the checks hold for any weights.
    at::manual_seed(1);
    Mlp local(4, 6, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    model->forward(at::randn({3, 4})).sum().backward();
    std::vector<at::Tensor> before;
    for (const auto& p : model->parameters()) before.push_back(p.grad().clone());
    const double norm = clip_grad_norm_(*model, 1e9);
    EXPECT_GT(norm, 0);
    size_t i = 0;
    for (const auto& p : model->parameters()) {
      EXPECT_TRUE(at::equal(p.grad(), before[i++])) << "rank " << ctx.rank;
    }
  });
}

// Parameters held whole (no FSDP): the same norm and gradients as
// torch::nn::utils::clip_grad_norm_, clipping or not, for p = 2, 1.5 and inf;
// a parameter without a gradient is skipped.
TEST(ClipGradNormWholeParameters, MatchesTorchClip) {
  for (const double norm_type : {2.0, 1.5, std::numeric_limits<double>::infinity()}) {
    for (const double max_norm : {0.01, 1e9}) {
      at::manual_seed(3);
      Mlp ours(4, 6, 2, /*units=*/false);
      Mlp reference(4, 6, 2, /*units=*/false);
      copy_state(*reference, *ours);
      const at::Tensor x = at::randn({5, 4});
      ours->forward(x).pow(2).sum().backward();
      reference->forward(x).pow(2).sum().backward();
      std::vector<at::Tensor> params = ours->parameters();
      params.push_back(at::zeros({3}, at::requires_grad()));  // no gradient
      const at::Tensor norm = clip_grad_norm_tensor_(params, max_norm, norm_type);
      const double expected =
          torch::nn::utils::clip_grad_norm_(reference->parameters(), max_norm, norm_type);
      const std::string label =
          "p=" + norm_name(norm_type) + " max_norm=" + std::to_string(max_norm);
      EXPECT_NEAR(norm.item<double>(), expected, 1e-6 * expected) << label;
      EXPECT_EQ(max_norm < expected, max_norm < 1) << label << ": the case clips, or not";
      for (size_t i = 0; i < reference->parameters().size(); ++i) {
        EXPECT_TRUE(at::allclose(ours->parameters()[i].grad(), reference->parameters()[i].grad(),
                                 1e-6, 1e-9))
            << label << ", parameter " << i;
      }
    }
  }
}

TEST(ClipGradNormWholeParameters, BadArguments) {
  std::vector<at::Tensor> params{at::ones({2}, at::requires_grad())};
  EXPECT_THROWS_WITH(clip_grad_norm_tensor_(params, 1.0, 0.0), "norm_type is 0; use a p > 0");
  EXPECT_THROWS_WITH(clip_grad_norm_tensor_(params, -1.0), "max_norm is -1; it must be >= 0");
  EXPECT_EQ(clip_grad_norm_tensor_(std::vector<at::Tensor>{}, 1.0).item<double>(), 0.0);
}

TEST(ClipGradNormErrors, BadArgumentsAndCallers) {
  run_ranks(1, [](RankContext& ctx) {
    Mlp local(4, 6, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    model->forward(at::randn({3, 4})).sum().backward();
    EXPECT_THROWS_WITH(clip_grad_norm_(*model, 1.0, 0.0), "norm_type is 0; use a p > 0");
    EXPECT_THROWS_WITH(clip_grad_norm_(*model, 1.0, -2.0), "norm_type is -2");
    EXPECT_THROWS_WITH(clip_grad_norm_(*model, -1.0), "max_norm is -1; it must be >= 0");
    auto* unit = dynamic_cast<UnitModule*>(local->layers->ptr(0).get());
    ASSERT_NE(unit, nullptr);
    EXPECT_THROWS_WITH(clip_grad_norm_(*unit, 1.0),
                       "clip_grad_norm_ needs the root module that fully_shard returned");
  });
}

TEST(ClipGradNormErrors, AfterABackwardWithoutSync) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(4, 6, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    {
      NoSyncGuard no_sync(*model);
      model->forward(at::randn({3, 4})).sum().backward();
    }
    EXPECT_THROWS_WITH(clip_grad_norm_(*model, 1.0),
                       "clip_grad_norm_ was called after a backward without gradient sync; run a "
                       "synchronizing backward first");
  });
}

}  // namespace
}  // namespace fsdp::testing
