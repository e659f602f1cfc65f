// Mixed precision: bf16 compute with fp32 master shards and fp32 gradient
// reduction, against a single process doing the same by hand.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 12;

// bf16 keeps 8 bits of mantissa (unit roundoff 2^-8 = 3.9e-3). FSDP and the
// reference round at different places (each rank's partial gradients are
// rounded to bf16 before the fp32 reduction; the reference rounds the
// global-batch gradient once), so losses agree to a few bf16 ulps of the
// logits, not to fp32 precision. 2e-2 relative is ~5 ulps; the measured
// difference is printed when it is exceeded.
constexpr double kBf16LossRtol = 2e-2;

struct Data {
  at::Tensor tokens, targets;
};

Data make_data() {
  at::manual_seed(11);
  const auto c = tiny_gpt_config(true);
  return {at::randint(0, c.vocab_size, {kSteps, kBatch, c.context}),
          at::randint(0, c.vocab_size, {kSteps, kBatch, c.context})};
}

// Single process: fp32 master weights, a bf16 copy for compute, fp32 grads.
std::vector<double> bf16_reference(const models::GPT& init, const Data& data) {
  models::GPT master(tiny_gpt_config(true));
  copy_state(*master, *init);
  models::GPT compute(tiny_gpt_config(true));
  auto opt = make_optimizer(OptimizerKind::kAdamW, master->parameters());
  std::vector<double> losses;
  auto master_params = master->named_parameters();
  for (int step = 0; step < kSteps; ++step) {
    {
      at::NoGradGuard no_grad;
      for (auto& p : compute->named_parameters()) {
        p.value().set_data(master_params[p.key()].detach().to(at::kBFloat16));
      }
    }
    for (auto& p : compute->parameters()) p.mutable_grad() = at::Tensor();
    at::Tensor logits = compute->forward(data.tokens[step]).to(at::kFloat);
    at::Tensor loss = models::lm_loss(logits, data.targets[step]);
    loss.backward();
    for (auto& p : compute->named_parameters()) {
      master_params[p.key()].mutable_grad() = p.value().grad().to(at::kFloat);
    }
    opt->step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

std::vector<double> fsdp_losses(int world_size, const models::GPT& init, const Data& data,
                                const FullyShardOptions& base, bool check_dtypes = false) {
  std::vector<double> losses;
  run_ranks(world_size, [&](RankContext& ctx) {
    models::GPT local(tiny_gpt_config(true));
    copy_state(*local, *init);
    FullyShardOptions options = base;
    auto model = fully_shard(local, options.process_group(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    std::vector<double> mine;
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(data.tokens[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(data.targets[step], ctx.rank, ctx.world_size);
      at::Tensor logits = model->forward(x);
      at::Tensor loss = models::lm_loss(logits.to(at::kFloat), y);
      opt->zero_grad();
      loss.backward();
      if (check_dtypes) {
        EXPECT_EQ(logits.scalar_type(), at::kBFloat16) << "compute runs in param_dtype";
        for (const auto& p : model->parameters()) {
          EXPECT_EQ(p.scalar_type(), at::kFloat) << "the optimizer must see fp32 master shards";
          if (p.grad().defined()) {
            EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
          }
        }
      }
      opt->step();
      mine.push_back(global_mean(*ctx.group, loss.item<double>()));
    }
    if (ctx.rank == 0) losses = mine;
  });
  return losses;
}

TEST(MixedPrecision, Bf16ComputeFp32ReduceTracksReference) {
  const Data data = make_data();
  at::manual_seed(5);
  models::GPT init(tiny_gpt_config(true));
  const auto reference = bf16_reference(init, data);
  const auto mp = MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat);
  for (int ws : {2, 3}) {
    const auto losses = fsdp_losses(ws, init, data, FullyShardOptions().mp(mp), true);
    ASSERT_EQ(losses.size(), reference.size());
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_LE(relative_diff(losses[i], reference[i]), kBf16LossRtol)
          << "ws " << ws << " step " << i << ": fsdp " << losses[i] << " reference " << reference[i];
    }
  }
}

TEST(MixedPrecision, Fp32PolicyIsBitwiseEqualToNoPolicy) {
  const Data data = make_data();
  at::manual_seed(5);
  models::GPT init(tiny_gpt_config(true));
  const auto plain = fsdp_losses(2, init, data, FullyShardOptions());
  const auto fp32 = fsdp_losses(
      2, init, data,
      FullyShardOptions().mp(MixedPrecisionPolicy().param_dtype(at::kFloat).reduce_dtype(at::kFloat)));
  ASSERT_EQ(plain.size(), fp32.size());
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(plain[i], fp32[i]) << "step " << i;
}

TEST(MixedPrecision, OutputDtypeCastsTheUnitsOutputs) {
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(
        models::GPT(tiny_gpt_config(false)),
        FullyShardOptions(ctx.group).mp(
            MixedPrecisionPolicy().param_dtype(at::kBFloat16).output_dtype(at::kFloat)));
    at::Tensor tokens = at::randint(0, 256, {2, 8});
    at::Tensor logits = model->forward(tokens);
    EXPECT_EQ(logits.scalar_type(), at::kFloat);
    models::lm_loss(logits, tokens).backward();
    for (const auto& p : model->parameters()) {
      ASSERT_TRUE(p.grad().defined());
      EXPECT_EQ(p.grad().scalar_type(), at::kFloat);
    }
  });
}

TEST(MixedPrecision, BufferDtypeCastsFloatingBuffersOnly) {
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(models::GPT(tiny_gpt_config(true)),
                             FullyShardOptions(ctx.group).mp(
                                 MixedPrecisionPolicy().buffer_dtype(at::kBFloat16)));
    for (const auto& b : model->named_buffers()) {
      EXPECT_EQ(b.value().scalar_type(), at::kBool) << b.key() << ": the causal mask is not floating";
    }
  });
  run_ranks(2, [](RankContext& ctx) {
    auto mlp = Mlp(7, 10, 3, true);
    mlp->register_buffer("running", at::ones({4}));
    auto model = fully_shard(mlp, FullyShardOptions(ctx.group).mp(
                                      MixedPrecisionPolicy().buffer_dtype(at::kBFloat16)));
    EXPECT_EQ(model->named_buffers()["running"].scalar_type(), at::kBFloat16);
  });
}

// FSDP2's rule (MixedPrecisionPolicy and FSDPParam.init_dtype_attrs in
// torch/distributed/fsdp/_fully_shard/): gradients are computed in
// param_dtype and, with reduce_dtype unset, reduced in it too, so a ported
// param_dtype(bf16) policy reduces in bf16 in both libraries. Seen twice:
// in unit_infos, and in the dtype of the reduced shard the all-reduce hook
// receives.
TEST(MixedPrecision, ReduceDtypeFollowsParamDtypeWhenUnset) {
  run_ranks(2, [](RankContext& ctx) {
    const auto reduce_dtypes = [&ctx](const MixedPrecisionPolicy& mp) {
      Mlp local(4, 5, 2, true);
      local->to(at::kDouble);
      auto model = fully_shard(local, FullyShardOptions(ctx.group).mp(mp));
      std::vector<at::ScalarType> dtypes;
      for (const auto& info : unit_infos(*model)) dtypes.push_back(info.reduce_dtype);
      model->set_all_reduce_hook(
          [&dtypes](const at::Tensor& shard) { dtypes.push_back(shard.scalar_type()); });
      model->forward(at::randn({2, 4}, at::kDouble)).sum().backward();
      EXPECT_EQ(dtypes.size(), 6u) << "three units, each in unit_infos and in one hook call";
      return dtypes;
    };
    const auto expect_all = [](const std::vector<at::ScalarType>& dtypes, at::ScalarType expected) {
      for (at::ScalarType dtype : dtypes) EXPECT_EQ(dtype, expected);
    };
    expect_all(reduce_dtypes(MixedPrecisionPolicy().param_dtype(at::kFloat)), at::kFloat);
    expect_all(reduce_dtypes(MixedPrecisionPolicy().param_dtype(at::kBFloat16)), at::kBFloat16);
    expect_all(reduce_dtypes(MixedPrecisionPolicy()), at::kDouble);
    expect_all(
        reduce_dtypes(MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat)),
        at::kFloat);
  });
}

}  // namespace
}  // namespace fsdp::testing
