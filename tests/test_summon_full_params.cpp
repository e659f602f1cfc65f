// fsdp::SummonFullParams and apply_with_full_params: full parameters outside
// forward and backward, edits written back to the shards, and clear errors
// for misuse.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kWorld = 3;  // 10x7 + 10 = 80 elements: uneven shards

struct Trained {
  Mlp initial{nullptr}, reference{nullptr};
  at::Tensor inputs, targets;
};

// A reference trained 2 steps; FSDP models replay the same steps.
Trained make_trained() {
  Trained t;
  at::manual_seed(41);
  t.inputs = at::randn({2, 6, 7});
  t.targets = at::randn({2, 6, 3});
  t.reference = Mlp(7, 10, 3, true);
  t.initial = Mlp(7, 10, 3, true);
  copy_state(*t.initial, *t.reference);
  auto opt = make_optimizer(OptimizerKind::kAdamW, t.reference->parameters());
  for (int step = 0; step < 2; ++step) {
    at::Tensor loss = at::mse_loss(t.reference->forward(t.inputs[step]), t.targets[step]);
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  return t;
}

Sharded<Mlp> train_fsdp(const Trained& t, RankContext& ctx) {
  Mlp local(7, 10, 3, true);
  copy_state(*local, *t.initial);
  auto model = fully_shard(local, FullyShardOptions(ctx.group));
  auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
  for (int step = 0; step < 2; ++step) {
    at::Tensor loss = at::mse_loss(model->forward(local_rows(t.inputs[step], ctx.rank, kWorld)),
                                   local_rows(t.targets[step], ctx.rank, kWorld));
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  return model;
}

TEST(SummonFullParams, ValuesEqualTheReferenceAndShardsComeBack) {
  const Trained t = make_trained();
  run_ranks(kWorld, [&](RankContext& ctx) {
    auto model = train_fsdp(t, ctx);
    const auto ref = t.reference->named_parameters();
    {
      SummonFullParams full(*model);
      EXPECT_GT(memory_stats(*model).gathered_param_bytes, 0);
      for (const auto& p : model->named_parameters()) {
        ASSERT_EQ(p.value().sizes(), ref[p.key()].sizes()) << p.key();
        EXPECT_TRUE(at::allclose(p.value(), ref[p.key()], 1e-5, 1e-6)) << p.key();
      }
    }
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0);
    for (const auto& shard : param_shards(*model)) {
      EXPECT_EQ(shard.param.numel(), shard.numel) << shard.name << " is its shard again";
    }
    // Training goes on after a summon.
    at::Tensor loss = at::mse_loss(model->forward(local_rows(t.inputs[0], ctx.rank, kWorld)),
                                   local_rows(t.targets[0], ctx.rank, kWorld));
    loss.backward();
  });
}

TEST(SummonFullParams, WritebackPersistsEditsToTheShards) {
  const Trained t = make_trained();
  Mlp doubled(7, 10, 3, true);
  copy_state(*doubled, *t.reference);
  {
    at::NoGradGuard no_grad;
    for (auto& p : doubled->parameters()) p.mul_(2).add_(1);
  }
  run_ranks(kWorld, [&](RankContext& ctx) {
    auto model = train_fsdp(t, ctx);
    {
      SummonFullParams full(*model, SummonFullParamsOptions().writeback(false));
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.zero_();
    }
    expect_shards_match(*model, *t.reference, 1e-5, 1e-6, "no writeback: edits discarded");
    {
      SummonFullParams full(*model);
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.mul_(2).add_(1);
    }
    expect_shards_match(*model, *doubled, 1e-5, 1e-6, "rank " + std::to_string(ctx.rank));
  });
}

TEST(SummonFullParams, Rank0OnlyOffloadAndRecurse) {
  const Trained t = make_trained();
  run_ranks(kWorld, [&](RankContext& ctx) {
    auto model = train_fsdp(t, ctx);
    const auto ref = t.reference->named_parameters();
    {
      SummonFullParams full(*model, SummonFullParamsOptions().writeback(false).rank0_only(true));
      for (const auto& shard : param_shards(*model)) {
        const int64_t expected = ctx.rank == 0 ? ref[shard.name].numel() : shard.numel;
        EXPECT_EQ(shard.param.numel(), expected) << shard.name << " on rank " << ctx.rank;
      }
      if (ctx.rank == 0) {
        EXPECT_TRUE(at::allclose(model->named_parameters()["layers.0.weight"],
                                 ref["layers.0.weight"], 1e-5, 1e-6));
      }
    }
    {
      SummonFullParams full(*model, SummonFullParamsOptions().offload_to_cpu(true));
      EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0) << "host copies, no gathered buffers";
      for (const auto& p : model->named_parameters()) {
        EXPECT_TRUE(p.value().is_cpu());
        EXPECT_TRUE(at::allclose(p.value(), ref[p.key()], 1e-5, 1e-6)) << p.key();
      }
    }
    {
      SummonFullParams full(*model, SummonFullParamsOptions().recurse(false));
      EXPECT_EQ(model->named_parameters()["layers.4.weight"].sizes(), ref["layers.4.weight"].sizes())
          << "root unit summoned";
      auto nested = model->named_parameters()["layers.0.weight"];
      EXPECT_EQ(nested.dim(), 1) << "nested unit left sharded with recurse(false)";
    }
  });
}

// A root whose forward runs a callback, to misuse the guard inside forward.
struct CallbackNetImpl : torch::nn::Module {
  CallbackNetImpl() : fc(register_module("fc", torch::nn::Linear(4, 4))) {}
  at::Tensor forward(const at::Tensor& x) {
    if (callback) callback();
    return fc->forward(x);
  }
  torch::nn::Linear fc;
  std::function<void()> callback;
};
TORCH_MODULE(CallbackNet);

TEST(SummonFullParams, MisuseErrors) {
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(Mlp(7, 10, 3, true), FullyShardOptions(ctx.group));
    at::Tensor x = at::randn({2, 7});
    {
      SummonFullParams outer(*model);
      EXPECT_THROWS_WITH(SummonFullParams inner(*model),
                         "is already inside summon_full_params (nested guards over the same unit)");
      EXPECT_THROWS_WITH(model->forward(x), "was called inside summon_full_params");
    }
    {
      auto* nested = model->module()->layers[0]->as<UnitModule>();
      ASSERT_NE(nested, nullptr);
      SummonFullParams outer(*model, SummonFullParamsOptions().recurse(false));
      SummonFullParams inner(*nested);  // disjoint units: fine
      EXPECT_THROWS_WITH(outer.exit(), "guards ended out of order");
      inner.exit();
      outer.exit();
    }
    EXPECT_THROWS_WITH(SummonFullParams(*model, SummonFullParamsOptions().rank0_only(true)),
                       "rank0_only(true) and writeback(true) is not supported");
    at::Tensor loss = model->forward(x).sum();
    EXPECT_THROWS_WITH(SummonFullParams guard(*model), "after a forward whose backward has not run");
    loss.backward();
    SummonFullParams after(*model);  // fine once backward is done
  });
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(CallbackNet(), FullyShardOptions(ctx.group));
    model->module()->callback = [&] { SummonFullParams guard(*model); };
    EXPECT_THROWS_WITH(model->forward(at::randn({2, 4})), "created inside forward");
  });
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(CallbackNet(), FullyShardOptions(ctx.group));
    at::Tensor out = model->forward(at::randn({2, 4}));
    out.register_hook([&](const at::Tensor& grad) {
      SummonFullParams guard(*model);
      return grad;
    });
    EXPECT_THROWS_WITH(out.sum().backward(), "created inside backward");
  });
}

TEST(ApplyWithFullParams, CustomInitIsWrittenBack) {
  auto init = [](torch::nn::Module& m) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(&m)) {
      linear->weight.copy_(at::arange(linear->weight.numel(), at::kFloat).view_as(linear->weight) * 0.01);
      linear->bias.fill_(-0.5);
    }
  };
  Mlp expected(7, 10, 3, /*units=*/false);
  {
    at::NoGradGuard no_grad;
    expected->apply(init);
  }
  run_ranks(kWorld, [&](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    copy_state(*local, *expected);  // scale and shift
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    apply_with_full_params(*model, init);
    expect_shards_match(*model, *expected, 0, 0, "rank " + std::to_string(ctx.rank));
  });
}

}  // namespace
}  // namespace fsdp::testing
