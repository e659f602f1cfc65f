// CPU offload: shards and sharded gradients in host memory, copied to the
// compute device for every gather. On this CPU-only machine the compute
// device is the CPU, so the copies are host-to-host, but the code path is the
// one CUDA runs; here it is checked for logic and parity.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 4;
constexpr int64_t kBatch = 12;

TEST(Offload, MatchesSingleProcessTrainingAtWorldSizesTwoAndThree) {
  at::manual_seed(21);
  const auto config = tiny_gpt_config(true);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kBatch, config.context});
  at::Tensor targets = at::randint(0, config.vocab_size, {kSteps, kBatch, config.context});
  models::GPT reference(config);
  models::GPT init(config);
  copy_state(*init, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kAdamW, reference->parameters());
  const std::vector<double> ref_losses = train_steps(*ref_opt, kSteps, [&](int step) {
    return models::lm_loss(reference->forward(tokens[step]), targets[step]);
  });
  for (int ws : {2, 3}) {
    run_ranks(ws, [&](RankContext& ctx) {
      models::GPT local(config);
      copy_state(*local, *init);
      auto model = fully_shard(local, FullyShardOptions(ctx.group).offload(
                                          OffloadPolicy().offload_params(true)));
      auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
      for (int step = 0; step < kSteps; ++step) {
        at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
        at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
        at::Tensor loss = models::lm_loss(model->forward(x), y);
        opt->zero_grad();
        loss.backward();
        for (const auto& p : model->parameters()) {
          EXPECT_TRUE(p.device().is_cpu());
          if (p.grad().defined()) {
            EXPECT_TRUE(p.grad().device().is_cpu());
          }
        }
        opt->step();
        const double global = global_mean(*ctx.group, loss.item<double>());
        EXPECT_LE(relative_diff(global, ref_losses[step]), 1e-5) << "ws " << ws << " step " << step;
      }
      expect_shards_match(*model, *reference, 1e-5, 1e-5, "ws " + std::to_string(ws));
    });
  }
}

}  // namespace
}  // namespace fsdp::testing
