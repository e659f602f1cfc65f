// fully_shard broadcasts rank 0's buffers to every rank at wrap time
// (FullyShardOptions::sync_buffers, on by default), the buffers inside units
// included, and leaves them alone when that is turned off.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "fsdp/fsdp.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

class WithBuffersImpl : public torch::nn::Module {
 public:
  WithBuffersImpl() {
    lin = register_module("lin", torch::nn::Linear(4, 4));
    norm = register_module("norm", fsdp::Sharded<torch::nn::BatchNorm1d>(torch::nn::BatchNorm1d(4)));
    counter = register_buffer("counter", at::zeros({3}));
  }
  at::Tensor forward(const at::Tensor& x) { return norm->forward(lin->forward(x)); }
  torch::nn::Linear lin{nullptr};
  fsdp::Sharded<torch::nn::BatchNorm1d> norm{nullptr};
  at::Tensor counter;
};
TORCH_MODULE(WithBuffers);

void give_rank_buffers(WithBuffers& m, int rank) {
  at::NoGradGuard no_grad;
  m->counter.fill_(rank + 1.0);
  m->norm->module()->running_mean.fill_(10.0 * (rank + 1));
  m->norm->module()->running_var.fill_(rank + 2.0);
  m->norm->module()->num_batches_tracked.fill_(rank + 5);
}

TEST(Buffers, BroadcastFromRankZeroAtWrapTime) {
  run_ranks(3, [](RankContext& ctx) {
    WithBuffers local;
    give_rank_buffers(local, ctx.rank);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    EXPECT_TRUE(at::equal(local->counter, at::full({3}, 1.0))) << rank_str(ctx);
    EXPECT_TRUE(at::equal(local->norm->module()->running_mean, at::full({4}, 10.0)))
        << rank_str(ctx);
    EXPECT_TRUE(at::equal(local->norm->module()->running_var, at::full({4}, 2.0))) << rank_str(ctx);
    EXPECT_EQ(local->norm->module()->num_batches_tracked.item<int64_t>(), 5) << rank_str(ctx);
    // The model's own named buffers are the same tensors.
    auto buffers = model->named_buffers();
    EXPECT_TRUE(at::equal(buffers["norm.running_mean"], at::full({4}, 10.0))) << rank_str(ctx);
  }, quick());
}

TEST(Buffers, LeftAloneWhenSyncIsOff) {
  run_ranks(2, [](RankContext& ctx) {
    WithBuffers local;
    give_rank_buffers(local, ctx.rank);
    fully_shard(local, FullyShardOptions(ctx.group).sync_buffers(false));
    EXPECT_TRUE(at::equal(local->counter, at::full({3}, ctx.rank + 1.0))) << rank_str(ctx);
    EXPECT_EQ(local->norm->module()->num_batches_tracked.item<int64_t>(), ctx.rank + 5)
        << rank_str(ctx);
  }, quick());
}

}  // namespace
}  // namespace fsdp::testing
