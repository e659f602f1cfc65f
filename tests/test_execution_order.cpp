// Execution-order validation on every step: when one rank runs the units in
// another order on a later step, every rank fails with an error naming the
// unit each rank ran first differently, instead of hanging or mixing up
// parameters.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <cstdlib>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

// Two same-shaped units whose order a flag swaps.
struct TwoPathNetImpl : torch::nn::Module {
  TwoPathNetImpl()
      : a(register_module("a", Sharded<torch::nn::Linear>(torch::nn::Linear(4, 4)))),
        b(register_module("b", Sharded<torch::nn::Linear>(torch::nn::Linear(4, 4)))) {}
  at::Tensor forward(const at::Tensor& x) { return swapped ? a(b(x)) : b(a(x)); }
  Sharded<torch::nn::Linear> a, b;
  bool swapped = false;
};
TORCH_MODULE(TwoPathNet);

void train_until_rank1_swaps(RankContext& ctx, Sharded<TwoPathNet>& model, int swap_step) {
  for (int step = 0; step < swap_step; ++step) {
    model->forward(at::randn({2, 4})).sum().backward();
  }
  if (ctx.rank == 1) model->module()->swapped = true;
  const std::string expected = "at forward position 1, rank 0 ran 'a', rank 1 ran 'b'";
  EXPECT_THROWS_WITH(model->forward(at::randn({2, 4})), expected);
}

TEST(ExecutionOrder, EveryStepValidationCatchesALaterChange) {
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(TwoPathNet(), FullyShardOptions(ctx.group));
    model->set_validate_execution_order(true);
    train_until_rank1_swaps(ctx, model, 3);
  });
}

TEST(ExecutionOrder, FsdpDebugEnvironmentTurnsItOn) {
  setenv("FSDP_DEBUG", "1", 1);  // read by fully_shard; set before the ranks start
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(TwoPathNet(), FullyShardOptions(ctx.group));
    train_until_rank1_swaps(ctx, model, 2);
  });
  unsetenv("FSDP_DEBUG");
}

TEST(ExecutionOrder, FirstStepIsAlwaysValidated) {
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(TwoPathNet(), FullyShardOptions(ctx.group));
    train_until_rank1_swaps(ctx, model, 0);
  });
}

}  // namespace
}  // namespace fsdp::testing
