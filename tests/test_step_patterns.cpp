// Unusual-but-valid ways to run a step keep parity with one process:
//  - several forwards before one backward;
//  - an evaluation forward under at::NoGradGuard: nothing stays gathered, no
//    hooks, and training afterwards still matches; evaluation alone issues
//    only all-gathers;
//  - world size 1 (and 2) with all of the above in one step, plus a no-sync
//    micro-batch and clipping.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>

#include <functional>
#include <memory>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

// -- parity of unusual-but-valid uses -----------------------------------------

// What one training step does, given the model's forward; the same function
// drives the reference and every rank.
using Forward = std::function<at::Tensor(const at::Tensor&)>;

struct StepContext {
  Forward forward;
  at::Tensor x;  // this process's rows of the step's batch
  at::Tensor y;
  torch::optim::Optimizer* opt;
  UnitModule* root;  // null for the reference
};

using StepFn = std::function<double(StepContext&)>;

// Trains the GPT with `step_fn` in one process and on `world_size` ranks and
// compares the returned losses every step and the shards at the end.
void check_gpt_parity(int world_size, ShardingStrategy strategy, OptimizerKind optimizer,
                      int steps, const StepFn& step_fn) {
  const auto config = tiny_gpt_config(true);
  at::manual_seed(21);
  models::GPT reference(tiny_gpt_config(false));
  models::GPT initial(config);
  copy_state(*initial, *reference);
  at::Tensor tokens = at::randint(0, config.vocab_size, {steps, 12, config.context});
  at::Tensor targets = at::randint(0, config.vocab_size, {steps, 12, config.context});

  auto ref_opt = make_optimizer(optimizer, reference->parameters());
  std::vector<double> ref_losses;
  for (int step = 0; step < steps; ++step) {
    StepContext sc{[&](const at::Tensor& t) { return reference->forward(t); }, tokens[step],
                   targets[step], ref_opt.get(), nullptr};
    ref_losses.push_back(step_fn(sc));
  }

  run_ranks(world_size, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(strategy));
    auto opt = make_optimizer(optimizer, model->parameters());
    for (int step = 0; step < steps; ++step) {
      StepContext sc{[&](const at::Tensor& t) { return model->forward(t); },
                     local_rows(tokens[step], ctx.rank, ctx.world_size),
                     local_rows(targets[step], ctx.rank, ctx.world_size), opt.get(), model.get()};
      const double global = global_mean(*ctx.group, step_fn(sc));
      EXPECT_LE(relative_diff(global, ref_losses[step]), kRtol)
          << rank_str(ctx) << " step " << step << ": fsdp " << global << " vs reference "
          << ref_losses[step];
    }
    expect_shards_match(*model, *reference, kRtol, kAtol, rank_str(ctx));
  }, quick());
}

// Two forwards (the two halves of the batch) and one backward of the sum.
double two_forwards_one_backward(StepContext& sc) {
  const int64_t half = sc.x.size(0) / 2;
  at::Tensor l1 = models::lm_loss(sc.forward(sc.x.narrow(0, 0, half)), sc.y.narrow(0, 0, half));
  at::Tensor l2 =
      models::lm_loss(sc.forward(sc.x.narrow(0, half, half)), sc.y.narrow(0, half, half));
  at::Tensor loss = (l1 + l2) / 2;
  sc.opt->zero_grad();
  loss.backward();
  sc.opt->step();
  return loss.item<double>();
}

struct MultiForwardCase {
  int world_size;
  ShardingStrategy strategy;
  OptimizerKind optimizer;
};
void PrintTo(const MultiForwardCase& c, std::ostream* os) {  // how ctest lists the case
  *os << "ws" << c.world_size << "_" << fsdp::to_string(c.strategy) << "_" << to_string(c.optimizer);
}

class SeveralForwardsOneBackward : public ::testing::TestWithParam<MultiForwardCase> {};

TEST_P(SeveralForwardsOneBackward, MatchesTheReference) {
  const auto& c = GetParam();
  check_gpt_parity(c.world_size, c.strategy, c.optimizer, 3, two_forwards_one_backward);
}

INSTANTIATE_TEST_SUITE_P(
    Core, SeveralForwardsOneBackward,
    ::testing::Values(MultiForwardCase{2, ShardingStrategy::kFullShard, OptimizerKind::kAdamW},
                      MultiForwardCase{3, ShardingStrategy::kFullShard, OptimizerKind::kSgdMomentum},
                      MultiForwardCase{2, ShardingStrategy::kShardGradOp, OptimizerKind::kAdamW},
                      MultiForwardCase{3, ShardingStrategy::kNoShard, OptimizerKind::kAdamW}),
    [](const ::testing::TestParamInfo<MultiForwardCase>& info) {
      return "ws" + std::to_string(info.param.world_size) + "_" + to_string(info.param.strategy) +
             "_" + to_string(info.param.optimizer);
    });

// An evaluation forward under NoGradGuard before each training step: its
// output has no graph, nothing stays gathered afterwards, and the training
// around it still matches the reference (which evaluates the same way).
double eval_then_train(StepContext& sc) {
  at::Tensor eval_logits;
  {
    at::NoGradGuard no_grad;
    eval_logits = sc.forward(sc.x);
  }
  EXPECT_FALSE(eval_logits.requires_grad());
  EXPECT_EQ(eval_logits.grad_fn(), nullptr);
  if (sc.root) {
    EXPECT_EQ(memory_stats(*sc.root).gathered_param_bytes, 0)
        << "parameters stayed gathered after an evaluation forward";
  }
  const double eval_loss = models::lm_loss(eval_logits, sc.y).item<double>();
  at::Tensor loss = models::lm_loss(sc.forward(sc.x), sc.y);
  // Same parameters, same batch: the evaluation saw the same loss.
  EXPECT_LE(relative_diff(eval_loss, loss.item<double>()), 1e-6);
  sc.opt->zero_grad();
  loss.backward();
  sc.opt->step();
  return loss.item<double>();
}

TEST(EvalUnderNoGrad, FreesParametersAndTrainingStillMatches) {
  check_gpt_parity(2, ShardingStrategy::kFullShard, OptimizerKind::kAdamW, 3, eval_then_train);
}

TEST(EvalUnderNoGrad, ShardGradOpFreesParametersToo) {
  check_gpt_parity(3, ShardingStrategy::kShardGradOp, OptimizerKind::kSgdMomentum, 3,
                   eval_then_train);
}

// Evaluation alone, many times: no collective other than the all-gathers,
// and nothing accumulates.
TEST(EvalUnderNoGrad, IssuesOnlyAllGathers) {
  run_ranks(2, [](RankContext& ctx) {
    models::GPT local(tiny_gpt_config(true));
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    at::Tensor tokens = at::randint(0, 256, {2, 16});
    at::NoGradGuard no_grad;
    model->forward(tokens);  // the first forward validates the unit order
    const CommCounters before = ctx.group->counters();
    for (int i = 0; i < 3; ++i) model->forward(tokens);
    const CommCounters after = ctx.group->counters();
    EXPECT_EQ(after.all_gather - before.all_gather, 3 * 3) << rank_str(ctx) << ": root + 2 units";
    EXPECT_EQ(after.reduce_scatter - before.reduce_scatter, 0) << rank_str(ctx);
    EXPECT_EQ(after.all_reduce - before.all_reduce, 0) << rank_str(ctx);
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0) << rank_str(ctx);
    for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined()) << rank_str(ctx);
  }, quick());
}

// -- world size 1 -------------------------------------------------------------

// One rank, every feature in one step: two forwards, a no-sync micro-batch,
// clipping and an evaluation forward.
double everything_at_once(StepContext& sc) {
  const int64_t third = sc.x.size(0) / 3;
  auto part = [&](const at::Tensor& t, int i) { return t.narrow(0, i * third, third); };
  sc.opt->zero_grad();
  double total = 0;
  {
    // Micro-batch 1, without sync.
    std::unique_ptr<NoSyncGuard> guard;
    if (sc.root) guard = std::make_unique<NoSyncGuard>(*sc.root);
    at::Tensor l = models::lm_loss(sc.forward(part(sc.x, 0)), part(sc.y, 0)) / 3;
    l.backward();
    total += l.item<double>();
  }
  // Micro-batches 2 and 3 with two forwards and one backward.
  at::Tensor l2 = models::lm_loss(sc.forward(part(sc.x, 1)), part(sc.y, 1)) / 3;
  at::Tensor l3 = models::lm_loss(sc.forward(part(sc.x, 2)), part(sc.y, 2)) / 3;
  (l2 + l3).backward();
  total += l2.item<double>() + l3.item<double>();
  if (sc.root) {
    clip_grad_norm_(*sc.root, 0.1);
  } else {
    std::vector<at::Tensor> params;
    for (const auto& g : sc.opt->param_groups()) {
      for (const auto& p : g.params()) params.push_back(p);
    }
    torch::nn::utils::clip_grad_norm_(params, 0.1);
  }
  sc.opt->step();
  {
    at::NoGradGuard no_grad;
    sc.forward(sc.x);
  }
  return total;
}

TEST(WorldSizeOne, TrainsLikeTheReference) {
  check_gpt_parity(1, ShardingStrategy::kFullShard, OptimizerKind::kAdamW, 3, everything_at_once);
}

TEST(WorldSizeOne, SameStepOnTwoRanks) {
  check_gpt_parity(2, ShardingStrategy::kFullShard, OptimizerKind::kSgdMomentum, 3,
                   everything_at_once);
}

}  // namespace
}  // namespace fsdp::testing
