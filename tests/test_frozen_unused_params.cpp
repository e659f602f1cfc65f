// Parameters that are not plain trainable ones:
//  - frozen (requires_grad=false), including a unit that mixes frozen and
//    trainable parameters, and a unit that is frozen whole;
//  - unused in a step (a parameter, or a whole unit, skipped by forward on
//    every rank alike): its gradient must stay as the reference leaves it,
//    undefined if it never had one, so AdamW skips it.
// Parameters tied across units are an error: test_fully_shard_errors.cpp.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>

#include <functional>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

// in -> l1 (unit, bias frozen) -> tanh -> l2 (unit, frozen whole) -> tanh
//    -> l3 (root, weight frozen) -> * gain (root, trainable scalar)
class FrozenNetImpl : public torch::nn::Module {
 public:
  explicit FrozenNetImpl(bool units) {
    torch::nn::Linear l1(7, 9), l2(9, 9);
    l1->bias.set_requires_grad(false);
    l2->weight.set_requires_grad(false);
    l2->bias.set_requires_grad(false);
    body = register_module("body", torch::nn::Sequential());
    if (units) {
      body->push_back(fsdp::Sharded<torch::nn::Linear>(l1));
      body->push_back(torch::nn::Tanh());
      body->push_back(fsdp::Sharded<torch::nn::Linear>(l2));
    } else {
      body->push_back(l1);
      body->push_back(torch::nn::Tanh());
      body->push_back(l2);
    }
    body->push_back(torch::nn::Tanh());
    third = register_module("third", torch::nn::Linear(9, 3));
    third->weight.set_requires_grad(false);
    gain = register_parameter("gain", at::full({}, 1.25));
  }
  at::Tensor forward(const at::Tensor& x) { return third->forward(body->forward(x)) * gain; }

  torch::nn::Sequential body{nullptr};
  torch::nn::Linear third{nullptr};
  at::Tensor gain;
};
TORCH_MODULE(FrozenNet);

// The root skips unit `c` when `use_c` is not set; unit `gated` (the
// harness's Gated) skips `b` when `use_b` is not. The test sets both per
// step, the same on every rank.

class UnusedNetImpl : public torch::nn::Module {
 public:
  explicit UnusedNetImpl(bool units) {
    Gated gated;
    use_b = gated->use_b;
    if (units) {
      auto g = fsdp::Sharded<Gated>(gated);
      auto c = fsdp::Sharded<torch::nn::Linear>(torch::nn::Linear(6, 6));
      register_module("gated", g.ptr());
      register_module("c", c.ptr());
      gated_fn = [g](const at::Tensor& x) mutable { return g->forward(x); };
      c_fn = [c](const at::Tensor& x) mutable { return c->forward(x); };
    } else {
      torch::nn::Linear c(6, 6);
      register_module("gated", gated.ptr());
      register_module("c", c.ptr());
      gated_fn = [gated](const at::Tensor& x) mutable { return gated->forward(x); };
      c_fn = [c](const at::Tensor& x) mutable { return c->forward(x); };
    }
    head = register_module("head", torch::nn::Linear(6, 2));
    unused_root = register_parameter("unused_root", at::full({3}, 0.5));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = gated_fn(x);
    if (*use_c) h = c_fn(h);
    at::Tensor out = head->forward(h);
    if (*use_c) out = out + unused_root.sum();  // a root parameter, unused when !use_c
    return out;
  }
  void set_step(bool b_used, bool c_used) {
    *use_b = b_used;
    *use_c = c_used;
  }
  std::shared_ptr<bool> use_b;
  std::shared_ptr<bool> use_c = std::make_shared<bool>(true);
  std::function<at::Tensor(const at::Tensor&)> gated_fn, c_fn;
  torch::nn::Linear head{nullptr};
  at::Tensor unused_root;
};
TORCH_MODULE(UnusedNet);

// -- frozen -------------------------------------------------------------------

struct FrozenCase {
  int world_size;
  ShardingStrategy strategy;
  OptimizerKind optimizer;
};
void PrintTo(const FrozenCase& c, std::ostream* os) {  // how ctest lists the case
  *os << "ws" << c.world_size << "_" << fsdp::to_string(c.strategy) << "_" << to_string(c.optimizer);
}

class FrozenParams : public ::testing::TestWithParam<FrozenCase> {};

TEST_P(FrozenParams, MatchReferenceAndStayUnchanged) {
  const FrozenCase c = GetParam();
  at::manual_seed(31);
  FrozenNet reference(false);
  FrozenNet initial(true);
  copy_state(*initial, *reference);
  at::Tensor inputs = at::randn({4, 6, 7});
  at::Tensor targets = at::randn({4, 6, 3});

  auto ref_opt = make_optimizer(c.optimizer, reference->parameters());
  std::vector<double> ref_losses;
  for (int step = 0; step < 4; ++step) {
    at::Tensor loss = at::mse_loss(reference->forward(inputs[step]), targets[step]);
    ref_opt->zero_grad();
    loss.backward();
    ref_opt->step();
    ref_losses.push_back(loss.item<double>());
  }

  run_ranks(c.world_size, [&](RankContext& ctx) {
    FrozenNet local(true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
    auto opt = make_optimizer(c.optimizer, model->parameters());
    const std::string who = "rank " + std::to_string(ctx.rank);
    for (int step = 0; step < 4; ++step) {
      at::Tensor x = local_rows(inputs[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
      at::Tensor loss = at::mse_loss(model->forward(x), y);
      opt->zero_grad();
      loss.backward();
      for (const auto& p : model->named_parameters()) {
        if (!p.value().requires_grad()) {
          EXPECT_FALSE(p.value().grad().defined())
              << who << ": frozen parameter " << p.key() << " got a gradient";
        } else {
          EXPECT_TRUE(p.value().grad().defined()) << who << ": " << p.key() << " has no gradient";
        }
      }
      opt->step();
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[step]), kRtol)
          << who << " step " << step << ": fsdp " << global << " vs reference " << ref_losses[step];
    }
    // Frozen parameters keep their initial values, and the trainable ones
    // match the reference.
    expect_shards_match(*model, *reference, kRtol, kAtol, who);
    auto initial_params = initial->named_parameters();
    int frozen = 0;
    for (const auto& shard : param_shards(*model)) {
      if (shard.param.requires_grad()) continue;
      ++frozen;
      at::Tensor expected =
          initial_params[shard.name].detach().reshape(-1).narrow(0, shard.flat_begin, shard.numel);
      EXPECT_TRUE(at::equal(shard.param.detach().reshape(-1), expected))
          << who << ": frozen parameter " << shard.name << " changed";
    }
    EXPECT_EQ(frozen, 4) << who << ": body.0.bias, body.2.weight, body.2.bias, third.weight";
  });
}

INSTANTIATE_TEST_SUITE_P(
    Core, FrozenParams,
    ::testing::Values(FrozenCase{1, ShardingStrategy::kFullShard, OptimizerKind::kAdamW},
                      FrozenCase{2, ShardingStrategy::kFullShard, OptimizerKind::kSgdMomentum},
                      FrozenCase{2, ShardingStrategy::kFullShard, OptimizerKind::kAdamW},
                      FrozenCase{3, ShardingStrategy::kFullShard, OptimizerKind::kAdamW},
                      FrozenCase{3, ShardingStrategy::kShardGradOp, OptimizerKind::kSgdMomentum},
                      FrozenCase{2, ShardingStrategy::kNoShard, OptimizerKind::kAdamW}),
    [](const ::testing::TestParamInfo<FrozenCase>& info) {
      return "ws" + std::to_string(info.param.world_size) + "_" + to_string(info.param.strategy) +
             "_" + to_string(info.param.optimizer);
    });

// -- unused -------------------------------------------------------------------

struct UnusedCase {
  int world_size;
  ShardingStrategy strategy;
  OptimizerKind optimizer;
};
void PrintTo(const UnusedCase& c, std::ostream* os) {  // how ctest lists the case
  *os << "ws" << c.world_size << "_" << fsdp::to_string(c.strategy) << "_" << to_string(c.optimizer);
}

class UnusedParams : public ::testing::TestWithParam<UnusedCase> {};

// Per step: is `gated.b` used, is unit `c` (and the root's `unused_root`) used.
constexpr bool kUseB[] = {false, true, false, true, true};
constexpr bool kUseC[] = {false, true, true, false, true};
constexpr int kUnusedSteps = 5;

bool in_unused_set(const std::string& name, int step) {
  const bool b = name.rfind("gated.b.", 0) == 0;
  const bool c = name.rfind("c.", 0) == 0 || name == "unused_root";
  return (b && !kUseB[step]) || (c && !kUseC[step]);
}

// The single-process run: each step's loss, and which parameters were left
// without a gradient after step 0.
struct UnusedReferenceRun {
  std::vector<double> losses;
  std::vector<std::string> undefined_after_step0;
};

UnusedReferenceRun train_unused_reference(UnusedNet& reference, OptimizerKind optimizer,
                                          const at::Tensor& inputs, const at::Tensor& targets) {
  UnusedReferenceRun run;
  auto opt = make_optimizer(optimizer, reference->parameters());
  for (int step = 0; step < kUnusedSteps; ++step) {
    reference->set_step(kUseB[step], kUseC[step]);
    at::Tensor loss = at::mse_loss(reference->forward(inputs[step]), targets[step]);
    opt->zero_grad();
    loss.backward();
    if (step == 0) {
      for (const auto& p : reference->named_parameters()) {
        if (!p.value().grad().defined()) run.undefined_after_step0.push_back(p.key());
      }
    }
    opt->step();
    run.losses.push_back(loss.item<double>());
  }
  return run;
}

// After step 0's backward: never used yet means no gradient, exactly like the
// reference, so AdamW neither decays them nor creates state for them.
void expect_step0_gradients_only_where_used(const torch::nn::Module& model, const std::string& who) {
  for (const auto& p : model.named_parameters()) {
    EXPECT_EQ(p.value().grad().defined(), !in_unused_set(p.key(), 0))
        << who << ": parameter " << p.key()
        << (in_unused_set(p.key(), 0) ? " was unused but got a gradient"
                                      : " was used but has no gradient");
  }
}

// After step 0's optimizer step: AdamW's weight decay would have moved a
// parameter with a (zero) gradient; the unused ones must be exactly as
// initialized.
void expect_unused_shards_unstepped(const UnitModule& model, const UnusedNet& initial,
                                    const std::string& who) {
  auto initial_params = initial->named_parameters();
  for (const auto& shard : param_shards(model)) {
    if (!in_unused_set(shard.name, 0)) continue;
    at::Tensor expected =
        initial_params[shard.name].detach().reshape(-1).narrow(0, shard.flat_begin, shard.numel);
    EXPECT_TRUE(at::equal(shard.param.detach().reshape(-1), expected))
        << who << ": unused parameter " << shard.name << " was stepped";
  }
}

TEST_P(UnusedParams, MatchReferenceWithAdamWSkippingThem) {
  const UnusedCase c = GetParam();
  at::manual_seed(41);
  UnusedNet reference(false);
  UnusedNet initial(true);
  copy_state(*initial, *reference);
  at::Tensor inputs = at::randn({kUnusedSteps, 6, 6});
  at::Tensor targets = at::randn({kUnusedSteps, 6, 2});
  const UnusedReferenceRun ref = train_unused_reference(reference, c.optimizer, inputs, targets);
  // The reference itself must behave as the test assumes.
  ASSERT_EQ(ref.undefined_after_step0.size(), 5u)
      << "gated.b.weight, gated.b.bias, c.weight, c.bias, unused_root";
  for (const auto& name : ref.undefined_after_step0) ASSERT_TRUE(in_unused_set(name, 0)) << name;

  run_ranks(c.world_size, [&](RankContext& ctx) {
    UnusedNet local(true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
    auto opt = make_optimizer(c.optimizer, model->parameters());
    const std::string who = "rank " + std::to_string(ctx.rank);
    for (int step = 0; step < kUnusedSteps; ++step) {
      local->set_step(kUseB[step], kUseC[step]);
      at::Tensor x = local_rows(inputs[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
      at::Tensor loss = at::mse_loss(model->forward(x), y);
      opt->zero_grad();
      loss.backward();
      if (step == 0) expect_step0_gradients_only_where_used(*model, who);
      opt->step();
      if (step == 0) expect_unused_shards_unstepped(*model, initial, who);
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref.losses[step]), kRtol)
          << who << " step " << step << ": fsdp " << global << " vs reference " << ref.losses[step];
    }
    expect_shards_match(*model, *reference, kRtol, kAtol, who);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Core, UnusedParams,
    ::testing::Values(UnusedCase{1, ShardingStrategy::kFullShard, OptimizerKind::kAdamW},
                      UnusedCase{2, ShardingStrategy::kFullShard, OptimizerKind::kAdamW},
                      UnusedCase{3, ShardingStrategy::kFullShard, OptimizerKind::kAdamW},
                      UnusedCase{3, ShardingStrategy::kFullShard, OptimizerKind::kSgdMomentum},
                      UnusedCase{2, ShardingStrategy::kShardGradOp, OptimizerKind::kAdamW},
                      UnusedCase{3, ShardingStrategy::kNoShard, OptimizerKind::kAdamW}),
    [](const ::testing::TestParamInfo<UnusedCase>& info) {
      return "ws" + std::to_string(info.param.world_size) + "_" + to_string(info.param.strategy) +
             "_" + to_string(info.param.optimizer);
    });

}  // namespace
}  // namespace fsdp::testing
