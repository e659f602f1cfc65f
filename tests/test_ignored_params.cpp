// Ignored modules and parameters stay whole on every rank and out of FSDP's
// collectives; the user keeps them in sync. Parity holds when the test
// all-reduces their gradients by hand.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <unordered_set>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 4;
constexpr int kWorld = 2;

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
    auto model = fully_shard(local, FullyShardOptions()
                                        .process_group(ctx.group)
                                        .ignored_modules({local->layers->ptr(4)})
                                        .ignored_params({local->scale}));
    std::vector<at::Tensor> ignored;
    for (const auto& p : model->named_parameters()) {
      if (ignored_names.count(p.key())) ignored.push_back(p.value());
    }
    ASSERT_EQ(ignored.size(), 3u);
    for (const auto& shard : param_shards(*model)) {
      EXPECT_EQ(ignored_names.count(shard.name), 0u) << shard.name << " must not be sharded";
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

TEST(IgnoredParams, ErrorsNameTheFix) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions().process_group(ctx.group)
                                              .ignored_params({at::Tensor()})),
                       "ignored_params[0] is an undefined tensor");
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions().process_group(ctx.group)
                                              .ignored_modules({local.ptr()})),
                       "the root module is in ignored_modules");
  });
}

}  // namespace
}  // namespace fsdp::testing
