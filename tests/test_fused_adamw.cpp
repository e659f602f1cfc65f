// fsdp::FusedAdamW against torch::optim::AdamW: the same parameters, state
// and checkpoints after many steps, within rounding; alone, and through
// fully_shard at world sizes 1 and 2. On LibTorch >= 2.4 this exercises
// at::_fused_adamw_; on 1.13 the for-loop fallback.
//
// Tolerances (see [Note: fused AdamW] in src/fused_adamw.cpp): the kernel
// rounds once per element where the for-loop rounds after each operation.
//   double:   rtol 1e-12, atol 1e-14 after 25 steps
//   float:    rtol 1e-5,  atol 1e-6  after 25 steps
//   bfloat16: within 2^-5 of the tensor's largest magnitude after 6 steps
//             (4 ulps of it; the for-loop rounds each of about ten
//             operations to bfloat16, so an element near zero that came from
//             large terms carries their rounding)

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/version.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "compat.h"
#include "fsdp/checkpoint/training_state.h"
#include "fsdp/fsdp.h"
#include "fsdp/fused_adamw.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"
#include "harness/temp_dir.h"

namespace fsdp::testing {
namespace {

using torch::optim::AdamW;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;
using torch::optim::OptimizerParamGroup;

struct Tolerance {
  double rtol, atol;
  double of_largest;  // added to atol: this much of the expected tensor's largest magnitude
  int steps;
};

Tolerance tolerance_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble:
      return {1e-12, 1e-14, 0.0, 25};
    case at::kFloat:
      return {1e-5, 1e-6, 0.0, 25};
    default:
      return {0.0, 0.0, std::ldexp(1.0, -5), 6};
  }
}

void expect_close(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tol,
                  const std::string& what) {
  ASSERT_TRUE(actual.defined() && expected.defined()) << what;
  const at::Tensor a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  const double largest = e.abs().max().item<double>();
  EXPECT_TRUE(at::allclose(a, e, tol.rtol, tol.atol + tol.of_largest * largest))
      << what << ": largest difference " << (a - e).abs().max().item<double>() << ", "
      << (a - e).abs().max().item<double>() / largest << " of the largest magnitude " << largest;
}

// Parameters of several shapes, in two groups with different options: group 0
// decays, group 1 has its own betas and eps and amsgrad on.
std::vector<at::Tensor> make_params(at::ScalarType dtype) {
  at::manual_seed(11);
  std::vector<at::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{5}, {3, 4}, {2, 3, 4}, {1}, {33}}) {
    params.push_back(at::randn(shape, at::kDouble).to(dtype).requires_grad_());
  }
  return params;
}

std::vector<OptimizerParamGroup> make_groups(const std::vector<at::Tensor>& p) {
  std::vector<OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{p[0], p[1], p[2]},
                      std::make_unique<AdamWOptions>(AdamWOptions(1e-2).weight_decay(0.1)));
  groups.emplace_back(std::vector<at::Tensor>{p[3], p[4]},
                      std::make_unique<AdamWOptions>(AdamWOptions(3e-3)
                                                         .betas(std::make_tuple(0.8, 0.99))
                                                         .eps(1e-6)
                                                         .weight_decay(0.05)
                                                         .amsgrad(true)));
  return groups;
}

// Step `step`'s gradients, the same for both optimizers. The last parameter
// has none every third step, so its state must stay put while others move.
void set_grads(const std::vector<at::Tensor>& params, int step) {
  at::manual_seed(100 + step);
  for (size_t i = 0; i < params.size(); ++i) {
    auto& grad = params[i].mutable_grad();
    if (i + 1 == params.size() && step % 3 == 1) {
      grad = at::Tensor();
      continue;
    }
    grad = at::randn(params[i].sizes(), at::kDouble).mul(1.0 + i).to(params[i].scalar_type());
  }
}

// Steps both optimizers over the same gradients, lowering every group's lr
// between steps as a schedule does.
void step_both(torch::optim::Optimizer& a, const std::vector<at::Tensor>& pa,
               torch::optim::Optimizer& b, const std::vector<at::Tensor>& pb, int first, int last) {
  for (int step = first; step < last; ++step) {
    set_grads(pa, step);
    set_grads(pb, step);
    a.step();
    b.step();
    for (auto* opt : {&a, &b}) {
      for (auto& group : opt->param_groups()) {
        auto& options = static_cast<AdamWOptions&>(group.options());
        options.lr(options.lr() * 0.9);
      }
    }
  }
}

void expect_same_state(const torch::optim::Optimizer& actual, const std::vector<at::Tensor>& pa,
                       const torch::optim::Optimizer& expected, const std::vector<at::Tensor>& pe,
                       const Tolerance& tol) {
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::string what = "parameter " + std::to_string(i);
    expect_close(pa[i], pe[i], tol, what);
    const auto& sa = static_cast<const AdamWParamState&>(
        *actual.state().at(compat::optimizer_state_key(actual.state(), pa[i])));
    const auto& se = static_cast<const AdamWParamState&>(
        *expected.state().at(compat::optimizer_state_key(expected.state(), pe[i])));
    EXPECT_EQ(sa.step(), se.step()) << what;
    expect_close(sa.exp_avg(), se.exp_avg(), tol, what + " exp_avg");
    expect_close(sa.exp_avg_sq(), se.exp_avg_sq(), tol, what + " exp_avg_sq");
    EXPECT_EQ(sa.max_exp_avg_sq().defined(), se.max_exp_avg_sq().defined()) << what;
    if (se.max_exp_avg_sq().defined()) {
      expect_close(sa.max_exp_avg_sq(), se.max_exp_avg_sq(), tol, what + " max_exp_avg_sq");
    }
  }
}

}  // namespace

class FusedAdamWDtypeTest : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(FusedAdamWDtypeTest, MatchesAdamWWithGroupsAmsgradDecayAndLrChanges) {
  const at::ScalarType dtype = GetParam();
  const Tolerance tol = tolerance_for(dtype);
  auto fused_params = make_params(dtype), reference_params = make_params(dtype);
  FusedAdamW fused(make_groups(fused_params));
  AdamW reference(make_groups(reference_params));
  step_both(fused, fused_params, reference, reference_params, 0, tol.steps);
  expect_same_state(fused, fused_params, reference, reference_params, tol);
  // The last parameter had no gradient every third step, and did not step then.
  const auto& skipped = static_cast<const AdamWParamState&>(
      *fused.state().at(compat::optimizer_state_key(fused.state(), fused_params.back())));
  EXPECT_EQ(skipped.step(), tol.steps - (tol.steps + 1) / 3);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedAdamWDtypeTest,
                         ::testing::Values(at::kDouble, at::kFloat, at::kBFloat16),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

// The same parameters must have moved away from where they started: a step
// that did nothing would match a reference that did nothing too.
TEST(FusedAdamW, StepsMoveParametersAndCountSteps) {
  auto params = make_params(at::kFloat);
  const at::Tensor before = params[1].detach().clone();
  FusedAdamW opt(make_groups(params));
  set_grads(params, 0);
  opt.step();
  EXPECT_GT((params[1].detach() - before).abs().max().item<double>(), 1e-3);
  const auto& state = static_cast<const AdamWParamState&>(
      *opt.state().at(compat::optimizer_state_key(opt.state(), params[1])));
  EXPECT_EQ(state.step(), 1);
}

// maximize ascends: the same as AdamW descending on the negated gradient,
// and the gradients are left as they were.
TEST(FusedAdamW, MaximizeIsAdamWOnTheNegatedGradient) {
  auto fused_params = make_params(at::kFloat), reference_params = make_params(at::kFloat);
  FusedAdamW fused(make_groups(fused_params), AdamWOptions(), /*maximize=*/true);
  AdamW reference(make_groups(reference_params));
  EXPECT_TRUE(fused.maximize());
  for (int step = 0; step < 10; ++step) {
    set_grads(fused_params, step);
    set_grads(reference_params, step);
    const at::Tensor grad0 = fused_params[0].grad().clone();
    for (auto& p : reference_params) {
      if (p.grad().defined()) p.mutable_grad().neg_();
    }
    fused.step();
    reference.step();
    EXPECT_TRUE(at::equal(fused_params[0].grad(), grad0)) << "step " << step;
  }
  expect_same_state(fused, fused_params, reference, reference_params, tolerance_for(at::kFloat));
}

TEST(FusedAdamW, ClosureIsCalledAndItsLossReturned) {
  auto params = make_params(at::kFloat);
  FusedAdamW opt(make_groups(params));
  int calls = 0;
  at::Tensor loss = opt.step([&] {
    ++calls;
    set_grads(params, 0);
    return at::full({}, 4.5);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(loss.item<double>(), 4.5);
}

// The path this build takes: the fused kernel from LibTorch 2.4.
TEST(FusedAdamW, UsesTheFusedKernelFromLibTorch2_4) {
  const bool expected =
      TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);
  EXPECT_EQ(FusedAdamW::fused_kernel_available(), expected);
}

// Restrictions of the kernel are refused by name, never stepped around.
TEST(FusedAdamW, RefusesAGradientOfAnotherDtypeByName) {
  at::Tensor p = at::zeros({4}, at::kFloat).requires_grad_();
  p.mutable_grad() = at::ones({4}, at::kDouble);
  FusedAdamW opt(std::vector<at::Tensor>{p});
  // On either path: LibTorch 1.13's for-loop would fail inside ATen on it.
  EXPECT_THROWS_WITH(opt.step(),
                     "parameter 0 of group 0 (shape [4], Float on cpu) has a gradient of Double");
}

std::string archive_of(const torch::optim::Optimizer& opt) {
  torch::serialize::OutputArchive archive;
  opt.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void load_archive(torch::optim::Optimizer& opt, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  opt.load(archive);
}

// LibTorch 1.13's archives do not restore the groups' options (2.x's do); a
// resumed run sets its schedule's lr again, as this does.
void copy_lrs(torch::optim::Optimizer& to, const torch::optim::Optimizer& from) {
  for (size_t g = 0; g < from.param_groups().size(); ++g) {
    to.param_groups()[g].options().set_lr(from.param_groups()[g].options().get_lr());
  }
}

// Save with one, load into the other, continue: the same as not stopping.
// The fused optimizer that loads has stepped already, so its device step
// counts are stale and must follow the loaded int64 steps.
TEST(FusedAdamW, ArchivesLoadBetweenItAndAdamW) {
  const Tolerance tol = tolerance_for(at::kFloat);
  auto straight_params = make_params(at::kFloat), adamw_params = make_params(at::kFloat);
  AdamW straight(make_groups(straight_params));
  AdamW adamw(make_groups(adamw_params));
  auto fused_params = make_params(at::kFloat);
  FusedAdamW fused(make_groups(fused_params));
  step_both(straight, straight_params, adamw, adamw_params, 0, 8);
  step_both(fused, fused_params, fused, fused_params, 0, 2);  // steps twice per step: stale counts
  // AdamW -> FusedAdamW, at step 8.
  for (size_t i = 0; i < fused_params.size(); ++i) {
    at::NoGradGuard no_grad;
    fused_params[i].copy_(adamw_params[i]);
  }
  load_archive(fused, archive_of(adamw));
  copy_lrs(fused, adamw);
  step_both(straight, straight_params, fused, fused_params, 8, 14);
  expect_same_state(fused, fused_params, straight, straight_params, tol);
  // FusedAdamW -> AdamW, at step 14.
  load_archive(adamw, archive_of(fused));
  copy_lrs(adamw, fused);
  for (size_t i = 0; i < adamw_params.size(); ++i) {
    at::NoGradGuard no_grad;
    adamw_params[i].copy_(fused_params[i]);
  }
  step_both(straight, straight_params, adamw, adamw_params, 14, 20);
  expect_same_state(adamw, adamw_params, straight, straight_params, tol);
}

// Through fully_shard: FusedAdamW over the flat shards' per-parameter views
// against one process with torch::optim::AdamW on the same global batch.
constexpr int kShardSteps = 6;
constexpr int64_t kShardBatch = 8;

struct MlpData {
  at::Tensor inputs, targets;  // [steps, batch, 7], [steps, batch, 3]
};

MlpData mlp_data() {
  at::manual_seed(5);
  return {at::randn({kShardSteps, kShardBatch, 7}), at::randn({kShardSteps, kShardBatch, 3})};
}

Mlp initial_mlp(bool units) {
  at::manual_seed(9);
  return Mlp(7, 10, 3, units);
}

// A copy of `initial` for one rank. Ranks here are threads of one process:
// each calling initial_mlp() inside run_ranks interleaved their seeding and
// draws on the global generator, so a rank sometimes started from other
// weights than the reference, and fully_shard keeps each rank's own slice
// (the resume test failed in 5 of 56 runs under LibTorch 2.6).
Mlp rank_copy(const Mlp& initial) {
  Mlp local(7, 10, 3, /*units=*/true);
  copy_state(*local, *initial);
  return local;
}

std::unique_ptr<torch::optim::Optimizer> adamw_for(bool fused, std::vector<at::Tensor> params) {
  const auto options = AdamWOptions(1e-2).weight_decay(0.1);
  if (fused) return std::make_unique<FusedAdamW>(std::move(params), options);
  return std::make_unique<AdamW>(std::move(params), options);
}

// Steps [first, last) on this rank's rows; the global losses.
template <class ShardedMlp>
std::vector<double> train_mlp(RankContext& ctx, ShardedMlp& model, torch::optim::Optimizer& opt,
                              const MlpData& data, int first, int last) {
  std::vector<double> losses;
  for (int step = first; step < last; ++step) {
    at::Tensor x = local_rows(data.inputs[step], ctx.rank, ctx.world_size);
    at::Tensor y = local_rows(data.targets[step], ctx.rank, ctx.world_size);
    at::Tensor loss = at::mse_loss(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(global_mean(*ctx.group, loss.item<double>()));
  }
  return losses;
}

std::vector<double> reference_losses(Mlp& reference, const MlpData& data) {
  AdamW opt(reference->parameters(), AdamWOptions(1e-2).weight_decay(0.1));
  return train_steps(opt, kShardSteps, [&](int s) {
    return at::mse_loss(reference->forward(data.inputs[s]), data.targets[s]);
  });
}

class FusedAdamWShardedTest : public ::testing::TestWithParam<int> {};

TEST_P(FusedAdamWShardedTest, TrainsAsAdamWOnOneProcess) {
  const int world_size = GetParam();
  const MlpData data = mlp_data();
  Mlp reference = initial_mlp(false);
  const Mlp initial = initial_mlp(true);
  const std::vector<double> expected = reference_losses(reference, data);
  run_ranks(world_size, [&](RankContext& ctx) {
    auto model = fully_shard(rank_copy(initial), FullyShardOptions(ctx.group));
    auto opt = adamw_for(/*fused=*/true, model->parameters());
    const auto losses = train_mlp(ctx, model, *opt, data, 0, kShardSteps);
    for (int s = 0; s < kShardSteps; ++s) {
      EXPECT_LE(relative_diff(losses[s], expected[s]), 1e-5) << rank_str(ctx) << " step " << s;
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-6, rank_str(ctx));
    EXPECT_GT(optimizer_state_bytes(*opt), 0);
  });
}

// A libfsdp checkpoint (strict load) saved with one optimizer resumes with
// the other, at the other world size, as if training never stopped.
TEST_P(FusedAdamWShardedTest, CheckpointsResumeWithTheOtherOptimizer) {
  const int save_world = GetParam(), load_world = 3 - GetParam();
  const MlpData data = mlp_data();
  Mlp reference = initial_mlp(false);
  const Mlp initial = initial_mlp(true);
  const std::vector<double> expected = reference_losses(reference, data);
  TempDir dir("fsdp-fused-adamw");
  const std::string ckpt = dir / "step3";
  for (const bool save_fused : {true, false}) {
    SCOPED_TRACE(save_fused ? "saved by FusedAdamW" : "saved by AdamW");
    run_ranks(save_world, [&](RankContext& ctx) {
      auto model = fully_shard(rank_copy(initial), FullyShardOptions(ctx.group));
      auto opt = adamw_for(save_fused, model->parameters());
      train_mlp(ctx, model, *opt, data, 0, kShardSteps / 2);
      ckpt::save_training_state(*ctx.group, ckpt + std::to_string(save_fused), *model, opt.get());
    });
    run_ranks(load_world, [&](RankContext& ctx) {
      auto model = fully_shard(Mlp(7, 10, 3, true), FullyShardOptions(ctx.group));
      auto opt = adamw_for(!save_fused, model->parameters());
      ckpt::load_training_state(*ctx.group, ckpt + std::to_string(save_fused), *model, opt.get(),
                                /*strict=*/true);
      const auto losses = train_mlp(ctx, model, *opt, data, kShardSteps / 2, kShardSteps);
      for (int s = kShardSteps / 2; s < kShardSteps; ++s) {
        EXPECT_LE(relative_diff(losses[s - kShardSteps / 2], expected[s]), 1e-5)
            << rank_str(ctx) << " step " << s;
      }
      expect_shards_match(*model, *reference, 1e-5, 1e-6, rank_str(ctx));
    });
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FusedAdamWShardedTest, ::testing::Values(1, 2),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace fsdp::testing
