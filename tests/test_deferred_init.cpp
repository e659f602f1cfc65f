// Deferred initialization: a model whose parameters have no storage is
// materialized one module at a time, each rank keeping only its shards, and
// the result equals the model one process builds whole from the same seed.
// sync_module_states makes every rank start from rank 0's values.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <chrono>
#include <functional>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/multiprocess.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

using Net = ResettableNet;

int64_t storage_bytes(torch::nn::Module& m) {
  int64_t total = 0;
  for (const auto& p : m.parameters()) total += static_cast<int64_t>(p.storage().nbytes());
  return total;
}

// The same init on each module's own parameters, from one generator.
std::function<void(torch::nn::Module&)> uniform_init(at::Generator gen) {
  return [gen](torch::nn::Module& m) {
    at::NoGradGuard no_grad;
    for (auto& p : m.named_parameters(/*recurse=*/false)) p.value().uniform_(-0.5, 0.5, gen);
  };
}

// Pre-order over modules, the order fully_shard initializes them in.
void apply_preorder(torch::nn::Module& m, const std::function<void(torch::nn::Module&)>& fn) {
  fn(m);
  for (const auto& child : m.children()) apply_preorder(*child, fn);
}

TEST(DeferredInit, ResetParametersReproducesTheEagerModel) {
  at::manual_seed(61);
  Net eager(/*units=*/false);
  run_ranks(1, [&](RankContext& ctx) {
    Net local(true);  // construction draws; defer_init frees the values
    defer_init(*local);
    EXPECT_EQ(storage_bytes(*local), 0);
    at::manual_seed(61);  // one rank: the generator is not shared with others
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    expect_shards_match(*model, *eager, 0, 0, "reset_parameters path");
  });
}

// The same at world size 4, each rank its own process (and generator), as in
// a real job: every rank's shards are slices of the eagerly built model.
TEST(DeferredInit, ResetParametersReproducesTheEagerModelAcrossProcesses) {
  constexpr int kWorld = 4;
  const auto results = run_processes(std::string(FSDP_BIN_DIR) + "/deferred_init_probe", {}, kWorld,
                                     std::chrono::seconds(60), {{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorld));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << ":\n" << r.output;
    // 8 parameters: three Linear weights and biases, the LayerNorm's two.
    EXPECT_NE(r.output.find("deferred_init_probe rank " + std::to_string(r.rank) + " of 4: 8 parameters match"),
              std::string::npos)
        << r.output;
  }
}

TEST(DeferredInit, ParityAndNoRankHoldsMoreThanItsShardsPlusOneUnit) {
  constexpr int kWorld = 4, kSteps = 3;
  Net reference(false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  apply_preorder(*reference, uniform_init(gen));
  at::manual_seed(62);
  at::Tensor inputs = at::randn({kSteps, 8, 7});
  at::Tensor targets = at::randn({kSteps, 8, 3});
  Net trained(false);
  copy_state(*trained, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kAdamW, trained->parameters());
  const std::vector<double> ref_losses = train_steps(*ref_opt, kSteps, [&](int step) {
    return at::mse_loss(trained->forward(inputs[step]), targets[step]);
  });

  run_ranks(kWorld, [&](RankContext& ctx) {
    Net local(true);
    defer_init(*local);
    ASSERT_EQ(storage_bytes(*local), 0);
    for (const auto& p : local->parameters()) EXPECT_TRUE(is_deferred(p));
    auto model = fully_shard(local, FullyShardOptions(ctx.group)
                                        .param_init_fn(uniform_init(
                                            at::make_generator<at::CPUGeneratorImpl>(7))));
    expect_shards_match(*model, *reference, 0, 0, "after init, rank " + std::to_string(ctx.rank));
    const MemoryStats stats = memory_stats(*model);
    // One module's full parameters at a time: the largest is Linear(16, 16).
    EXPECT_EQ(stats.peak_init_param_bytes, (16 * 16 + 16) * 4);
    EXPECT_LE(stats.peak_init_param_bytes, std::max(stats.largest_unit_bytes, stats.root_unit_bytes));
    int64_t held = 0;  // what the parameters view: their shards only
    for (const auto& p : model->parameters()) held += p.numel() * 4;
    EXPECT_LE(held, stats.sharded_param_bytes) << "parameters hold only their shards";
    EXPECT_EQ(stats.gathered_param_bytes, 0);

    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor loss = at::mse_loss(model->forward(local_rows(inputs[step], ctx.rank, kWorld)),
                                     local_rows(targets[step], ctx.rank, kWorld));
      opt->zero_grad();
      loss.backward();
      opt->step();
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[step]), 1e-5) << "rank " << ctx.rank << " step " << step;
    }
    expect_shards_match(*model, *trained, 1e-5, 1e-5, "trained, rank " + std::to_string(ctx.rank));
  });
}

TEST(DeferredInit, SyncModuleStatesBroadcastsRank0) {
  Net reference(false);
  apply_preorder(*reference, uniform_init(at::make_generator<at::CPUGeneratorImpl>(100)));
  run_ranks(3, [&](RankContext& ctx) {
    // Eager: every rank starts from different values and buffers.
    Net eager(true);
    copy_state(*eager, *reference);
    {
      at::NoGradGuard no_grad;
      for (auto& p : eager->parameters()) p.add_(ctx.rank);
      eager->steps.fill_(ctx.rank);
    }
    auto model = fully_shard(eager, FullyShardOptions(ctx.group).sync_module_states(true));
    expect_shards_match(*model, *reference, 0, 0, "eager, rank " + std::to_string(ctx.rank));
    EXPECT_EQ(eager->steps.item<float>(), 0.f);

    // Deferred: each rank initializes from its own seed; rank 0's wins.
    Net deferred(true);
    defer_init(*deferred);
    auto model2 = fully_shard(deferred, FullyShardOptions(ctx.group)
                                            .sync_module_states(true)
                                            .param_init_fn(uniform_init(
                                                at::make_generator<at::CPUGeneratorImpl>(100 + ctx.rank))));
    expect_shards_match(*model2, *reference, 0, 0, "deferred, rank " + std::to_string(ctx.rank));
  });
}

TEST(DeferredInit, ModulesWithoutResetNeedParamInitFn) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(7, 10, 3, true);  // its root registers raw parameters
    defer_init(*local);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)),
                       "has deferred parameters ('scale'...) and no reset_parameters() fsdp knows; "
                       "pass FullyShardOptions().param_init_fn(fn)");
  });
}

}  // namespace
}  // namespace fsdp::testing
