// Activation checkpointing (fsdp::Checkpointed<M> and
// UnitModule::set_activation_checkpointing), alone and under FSDP.
//
// The reference for a checkpointed run is the same run without
// checkpointing: the recomputation computes the same values, so on the CPU
// every gradient must be bitwise equal, step after step, with the same
// collectives. Parity with one process then follows from the parity suite;
// one case here checks it directly too.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>

#include <functional>
#include <string>
#include <vector>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 12;  // divisible by world sizes 1-4

std::vector<at::Tensor> grads_of(const torch::nn::Module& module) {
  std::vector<at::Tensor> grads;
  for (const auto& p : module.parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  return grads;
}

void expect_bitwise(const std::vector<at::Tensor>& expected, const std::vector<at::Tensor>& actual,
                    const std::string& where) {
  ASSERT_EQ(expected.size(), actual.size()) << where;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(expected[i].defined(), actual[i].defined()) << where << ": tensor " << i;
    if (!expected[i].defined()) continue;
    EXPECT_TRUE(at::equal(expected[i], actual[i]))
        << where << ": tensor " << i << " differs by up to "
        << (expected[i].to(at::kDouble) - actual[i].to(at::kDouble)).abs().max().item<double>();
  }
}

// --- Without FSDP ------------------------------------------------------------

// Linear -> Dropout -> GELU -> Linear: a region whose recomputation must
// draw the dropout mask its forward drew.
class DropoutMlpImpl : public torch::nn::Module {
 public:
  DropoutMlpImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    drop = register_module("drop", torch::nn::Dropout(0.5));
    fc2 = register_module("fc2", torch::nn::Linear(16, 8));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(at::gelu(drop->forward(fc1->forward(x)))); }

  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(DropoutMlp);

// Two dropout regions in a row, each checkpointed or not.
class TwoRegionsImpl : public torch::nn::Module {
 public:
  explicit TwoRegionsImpl(bool checkpointed) {
    layers = register_module("layers", torch::nn::Sequential());
    for (int i = 0; i < 2; ++i) {
      if (checkpointed) {
        layers->push_back(Checkpointed<DropoutMlp>(DropoutMlp()));
      } else {
        layers->push_back(DropoutMlp());
      }
    }
  }
  at::Tensor forward(const at::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(TwoRegions);

TEST(ActivationCheckpointing, DropoutDrawsTheSameMaskAndGradientsAreBitwiseEqual) {
  at::manual_seed(3);
  TwoRegions plain(false), checkpointed(true);
  copy_state(*checkpointed, *plain);
  at::Tensor x = at::randn({6, 8}).requires_grad_();
  at::Tensor x2 = x.detach().clone().requires_grad_();

  at::manual_seed(11);
  plain->forward(x).pow(2).sum().backward();
  const at::Tensor after_plain = at::rand({4});
  at::manual_seed(11);
  checkpointed->forward(x2).pow(2).sum().backward();
  const at::Tensor after_checkpointed = at::rand({4});

  expect_bitwise(grads_of(*plain), grads_of(*checkpointed), "parameter gradients");
  expect_bitwise({x.grad()}, {x2.grad()}, "input gradient");
  // The recomputation put the RNG back: the stream continues as without it.
  EXPECT_TRUE(at::equal(after_plain, after_checkpointed));
}

TEST(ActivationCheckpointing, ForwardKeepsNoGraphInsideTheRegion) {
  Checkpointed<DropoutMlp> region(DropoutMlp{});
  at::Tensor x = at::randn({2, 8}).requires_grad_();
  at::Tensor y = region->forward(x);
  ASSERT_TRUE(y.requires_grad());
  // One node stands for the whole region, and it leads straight to x.
  ASSERT_TRUE(y.grad_fn());
  const auto& edges = y.grad_fn()->next_edges();
  ASSERT_EQ(edges.size(), 1u);
  EXPECT_EQ(edges[0].function, torch::autograd::impl::gradient_edge(x).function);
}

TEST(ActivationCheckpointing, WithoutGradItIsAPlainCall) {
  Checkpointed<DropoutMlp> region(DropoutMlp{});
  at::Tensor x = at::randn({2, 8}).requires_grad_();
  at::NoGradGuard no_grad;
  at::Tensor y = region->forward(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_FALSE(y.grad_fn());
}

// An embedding's input is integer: no input requires grad, yet its weight
// must get its gradient (see [Note: activation checkpointing], the anchor).
TEST(ActivationCheckpointing, RegionWithNoDifferentiableInputStillTrainsItsParameters) {
  at::manual_seed(5);
  torch::nn::Embedding plain(10, 4);
  Checkpointed<torch::nn::Embedding> checkpointed(torch::nn::Embedding(10, 4));
  copy_state(*checkpointed, *plain);
  at::Tensor tokens = at::randint(0, 10, {3, 5});
  plain->forward(tokens).pow(2).sum().backward();
  checkpointed->forward(tokens).pow(2).sum().backward();
  ASSERT_TRUE(checkpointed->module()->weight.grad().defined());
  expect_bitwise(grads_of(*plain), grads_of(*checkpointed), "embedding gradient");
}

TEST(ActivationCheckpointing, InputEditedInPlaceBeforeBackwardIsAnError) {
  Checkpointed<torch::nn::Linear> region(torch::nn::Linear(4, 4));
  at::Tensor leaf = at::randn({2, 4}).requires_grad_();
  at::Tensor x = leaf * 2;
  at::Tensor y = region->forward(x);
  x.add_(1.0);  // backward would recompute from a different input
  try {
    y.sum().backward();
    FAIL() << "backward ran from an input edited in place";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos) << e.what();
  }
}

TEST(ActivationCheckpointing, RetainGraphLetsBackwardRunTwice) {
  at::manual_seed(6);
  Checkpointed<DropoutMlp> region(DropoutMlp{});
  at::Tensor x = at::randn({3, 8}).requires_grad_();
  at::Tensor loss = region->forward(x).sum();
  loss.backward({}, /*retain_graph=*/true);
  const std::vector<at::Tensor> once = grads_of(*region);
  loss.backward();
  const std::vector<at::Tensor> twice = grads_of(*region);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_TRUE(at::equal(twice[i], once[i] * 2)) << i;
  try {
    loss.backward();
    FAIL() << "a third backward through a freed graph ran";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

// --- Under FSDP: bitwise against the same run without checkpointing ----------

struct RunRecord {
  std::vector<std::vector<at::Tensor>> grads;  // per step, this rank's shards
  std::vector<CommCounters> comm;              // per step, forward + backward
  std::vector<at::Tensor> params;              // after the last step
};

using MakeOptions = std::function<FullyShardOptions(RankContext&)>;

// Trains a GPT under FSDP with the given blocks checkpointed, in
// `micro_batches` micro-batches per step (no sync for all but the last).
RunRecord train_gpt(RankContext& ctx, models::GPTConfig config, int64_t checkpoint_every,
                    const models::GPT& initial, const MakeOptions& options, const at::Tensor& tokens,
                    int micro_batches = 1) {
  config.checkpoint_every = checkpoint_every;
  models::GPT local(config);
  copy_state(*local, *initial);
  auto model = fully_shard(local, options(ctx));
  auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
  RunRecord record;
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor rows = local_rows(tokens[step], ctx.rank, ctx.world_size);
    const CommCounters start = ctx.group->counters();
    opt->zero_grad();
    for (int micro = 0; micro < micro_batches; ++micro) {
      at::Tensor x = rows.chunk(micro_batches)[micro];
      const bool last = micro + 1 == micro_batches;
      model->set_requires_gradient_sync(last);
      models::lm_loss(model->forward(x), x).backward();
    }
    record.comm.push_back(ctx.group->counters() - start);
    record.grads.push_back(grads_of(*model));
    opt->step();
  }
  for (const auto& p : model->parameters()) record.params.push_back(p.detach().clone());
  return record;
}

void expect_same_runs(const RunRecord& plain, const RunRecord& checkpointed, const std::string& where) {
  for (int step = 0; step < kSteps; ++step) {
    const std::string at_step = where + " step " + std::to_string(step);
    expect_bitwise(plain.grads[step], checkpointed.grads[step], at_step + " gradients");
    EXPECT_EQ(plain.comm[step].all_gather, checkpointed.comm[step].all_gather) << at_step << ": all-gathers";
    EXPECT_EQ(plain.comm[step].reduce_scatter, checkpointed.comm[step].reduce_scatter)
        << at_step << ": reduce-scatters";
    EXPECT_EQ(plain.comm[step].all_reduce, checkpointed.comm[step].all_reduce) << at_step << ": all-reduces";
  }
  expect_bitwise(plain.params, checkpointed.params, where + " parameters after AdamW");
}

struct StrategyCase {
  int world_size;
  ShardingStrategy strategy;
};

std::string strategy_case_name(const ::testing::TestParamInfo<StrategyCase>& info) {
  return "ws" + std::to_string(info.param.world_size) + "_" + to_string(info.param.strategy);
}
void PrintTo(const StrategyCase& c, std::ostream* os) { *os << strategy_case_name({c, 0}); }

class CheckpointedStrategies : public ::testing::TestWithParam<StrategyCase> {};

TEST_P(CheckpointedStrategies, GptGradientsBitwiseEqualWithTheSameCollectives) {
  const StrategyCase c = GetParam();
  auto config = tiny_gpt_config(true);
  config.n_layer = 3;
  at::manual_seed(21);
  models::GPT initial(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kGlobalBatch, config.context});
  const MakeOptions options = [&](RankContext& ctx) { return FullyShardOptions(ctx.group).strategy(c.strategy); };
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const RunRecord plain = train_gpt(ctx, config, 0, initial, options, tokens);
    for (int64_t every : {1, 2}) {
      expect_same_runs(plain, train_gpt(ctx, config, every, initial, options, tokens),
                       rank_str(ctx) + " every " + std::to_string(every));
    }
  });
}

TEST_P(CheckpointedStrategies, MlpGradientsBitwiseEqual) {
  const StrategyCase c = GetParam();
  at::manual_seed(22);
  Mlp initial(7, 10, 3, true);
  at::Tensor inputs = at::randn({kSteps, kGlobalBatch, 7});
  at::Tensor targets = at::randn({kSteps, kGlobalBatch, 3});
  run_ranks(c.world_size, [&](RankContext& ctx) {
    std::vector<RunRecord> runs;
    for (bool checkpoint : {false, true}) {
      Mlp local(7, 10, 3, true);
      copy_state(*local, *initial);
      for (const auto& module : local->layers->children()) {
        if (auto* unit = dynamic_cast<UnitModule*>(module.get())) unit->set_activation_checkpointing(checkpoint);
      }
      auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
      auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
      RunRecord record;
      for (int step = 0; step < kSteps; ++step) {
        at::Tensor x = local_rows(inputs[step], ctx.rank, ctx.world_size);
        at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
        opt->zero_grad();
        const CommCounters start = ctx.group->counters();
        at::mse_loss(model->forward(x), y).backward();
        record.comm.push_back(ctx.group->counters() - start);
        record.grads.push_back(grads_of(*model));
        opt->step();
      }
      for (const auto& p : model->parameters()) record.params.push_back(p.detach().clone());
      runs.push_back(std::move(record));
    }
    expect_same_runs(runs[0], runs[1], rank_str(ctx));
  });
}

std::vector<StrategyCase> strategy_cases() {
  std::vector<StrategyCase> cases;
  for (int ws = 1; ws <= 4; ++ws) {
    for (auto s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
      cases.push_back({ws, s});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Core, CheckpointedStrategies, ::testing::ValuesIn(strategy_cases()),
                         strategy_case_name);

// --- Composition with the rest of FSDP ---------------------------------------

struct CompositionCase {
  std::string name;
  int world_size;
  MakeOptions options;
  int micro_batches;
};

void PrintTo(const CompositionCase& c, std::ostream* os) { *os << c.name; }

class CheckpointedComposition : public ::testing::TestWithParam<CompositionCase> {};

TEST_P(CheckpointedComposition, GptGradientsBitwiseEqual) {
  const CompositionCase& c = GetParam();
  auto config = tiny_gpt_config(true);
  config.n_layer = 3;
  at::manual_seed(23);
  models::GPT initial(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kGlobalBatch, config.context});
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const RunRecord plain = train_gpt(ctx, config, 0, initial, c.options, tokens, c.micro_batches);
    const RunRecord all = train_gpt(ctx, config, 1, initial, c.options, tokens, c.micro_batches);
    expect_same_runs(plain, all, rank_str(ctx) + " " + c.name);
  });
}

std::vector<CompositionCase> composition_cases() {
  auto base = [](RankContext& ctx) { return FullyShardOptions(ctx.group); };
  return {
      {"no_prefetch", 2, [=](RankContext& ctx) { return base(ctx).prefetch(false); }, 1},
      {"bf16_compute_fp32_reduce", 2,
       [=](RankContext& ctx) {
         return base(ctx).mp(MixedPrecisionPolicy().param_dtype(at::kBFloat16).reduce_dtype(at::kFloat));
       },
       1},
      {"offload", 2, [=](RankContext& ctx) { return base(ctx).offload(OffloadPolicy().offload_params(true)); }, 1},
      {"keep_gathered_after_forward", 2,
       [=](RankContext& ctx) { return base(ctx).reshard_after_forward(false); }, 1},
      {"reshard_to_group_of_2", 4,
       [=](RankContext& ctx) { return base(ctx).reshard_after_forward_group_size(2); }, 1},
      {"hybrid_2x2", 4,
       [](RankContext& ctx) {
         return FullyShardOptions(make_hybrid_mesh(ctx.group, 2)).strategy(ShardingStrategy::kHybridShard);
       },
       1},
      {"accumulate_3_micro_batches", 2, base, 3},
  };
}

INSTANTIATE_TEST_SUITE_P(Fsdp, CheckpointedComposition, ::testing::ValuesIn(composition_cases()),
                         [](const ::testing::TestParamInfo<CompositionCase>& info) { return info.param.name; });

// Against one process without checkpointing, SGD with momentum (no Adam
// epsilon to amplify rounding): the parity suite's bounds.
TEST(ActivationCheckpointing, MatchesSingleProcessTraining) {
  auto config = tiny_gpt_config(true);
  config.n_layer = 3;
  at::manual_seed(24);
  models::GPT reference(config);
  models::GPT initial(config);
  copy_state(*initial, *reference);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kGlobalBatch, config.context});
  auto ref_opt = make_optimizer(OptimizerKind::kSgdMomentum, reference->parameters());
  std::vector<double> ref_losses;
  for (int step = 0; step < kSteps; ++step) {
    ref_losses.push_back(lm_train_step(reference, *ref_opt, tokens[step]).item<double>());
  }
  run_ranks(3, [&](RankContext& ctx) {
    auto checkpointed = config;
    checkpointed.checkpoint_every = 1;
    models::GPT local(checkpointed);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      const double loss = global_mean(*ctx.group, lm_train_step(model, *opt, x).item<double>());
      EXPECT_LT(relative_diff(loss, ref_losses[step]), 1e-5) << rank_str(ctx) << " step " << step;
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-6, rank_str(ctx));
  });
}

// --- Where checkpointing meets unit boundaries --------------------------------

// A unit whose module checkpoints a part of itself.
TEST(ActivationCheckpointing, CheckpointedModuleInsideAUnitWorks) {
  auto make = [](bool checkpointed) {
    torch::nn::Sequential inner;
    if (checkpointed) {
      inner->push_back(Checkpointed<torch::nn::Linear>(torch::nn::Linear(6, 6)));
    } else {
      inner->push_back(torch::nn::Linear(6, 6));
    }
    inner->push_back(torch::nn::Tanh());
    inner->push_back(torch::nn::Linear(6, 2));
    torch::nn::Sequential outer;
    outer->push_back(torch::nn::Linear(4, 6));
    outer->push_back(Sharded<torch::nn::Sequential>(inner));
    return outer;
  };
  at::manual_seed(25);
  torch::nn::Sequential initial = make(false);
  at::Tensor inputs = at::randn({kSteps, kGlobalBatch, 4});
  run_ranks(2, [&](RankContext& ctx) {
    std::vector<std::vector<at::Tensor>> grads;
    for (bool checkpointed : {false, true}) {
      torch::nn::Sequential local = make(checkpointed);
      copy_state(*local, *initial);
      auto model = fully_shard(local, FullyShardOptions(ctx.group));
      model->forward(local_rows(inputs[0], ctx.rank, 2)).pow(2).sum().backward();
      grads.push_back(grads_of(*model));
    }
    expect_bitwise(grads[0], grads[1], rank_str(ctx));
  });
}

TEST(ActivationCheckpointing, UnitInsideACheckpointedModuleIsRefusedAtWrapTime) {
  torch::nn::Sequential inner;
  inner->push_back(Sharded<torch::nn::Linear>(torch::nn::Linear(4, 4)));
  torch::nn::Sequential outer;
  outer->push_back(Checkpointed<torch::nn::Sequential>(inner));
  run_ranks(1, [&](RankContext& ctx) {
    try {
      fully_shard(outer, FullyShardOptions(ctx.group));
      FAIL() << "fully_shard accepted a unit inside a checkpointed module";
    } catch (const c10::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("unit '0.0' is inside the checkpointed module '0'"), std::string::npos) << message;
      EXPECT_NE(message.find("set_activation_checkpointing(true) on each"), std::string::npos) << message;
    }
  });
}

TEST(ActivationCheckpointing, CheckpointedUnitHoldingAUnitIsRefusedAtWrapTime) {
  torch::nn::Sequential inner;
  inner->push_back(Sharded<torch::nn::Linear>(torch::nn::Linear(4, 4)));
  Sharded<torch::nn::Sequential> unit(inner);
  unit->set_activation_checkpointing(true);
  torch::nn::Sequential outer;
  outer->push_back(unit);
  run_ranks(1, [&](RankContext& ctx) {
    try {
      fully_shard(outer, FullyShardOptions(ctx.group));
      FAIL() << "fully_shard accepted a checkpointed unit holding a unit";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("unit '0.0' is inside the checkpointed module '0'"), std::string::npos)
          << e.what();
    }
  });
}

// --- Memory, counted at the allocator ------------------------------------------

// Peak CPU bytes above the level before forward, over one forward and
// backward of an 8-block GPT with every Nth block checkpointed.
int64_t peak_step_bytes(int64_t checkpoint_every, bool sharded) {
  auto config = tiny_gpt_config(sharded);
  config.n_layer = 8;
  config.d_model = 64;
  config.context = 64;
  config.checkpoint_every = checkpoint_every;
  at::manual_seed(26);
  models::GPT model(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {8, config.context});
  auto& counter = CpuAllocationCounter::install();
  int64_t peak = 0;
  auto measure = [&](auto& m) {
    for (int step = 0; step < 2; ++step) {  // the second step: gradients already allocated
      const int64_t before = counter.current_bytes();
      counter.reset_peak();
      models::lm_loss(m->forward(tokens), tokens).backward();
      peak = counter.peak_bytes() - before;
    }
  };
  if (!sharded) {
    measure(model);
    return peak;
  }
  run_ranks(1, [&](RankContext& ctx) {
    auto root = fully_shard(model, FullyShardOptions(ctx.group));
    measure(root);
  });
  return peak;
}

TEST(ActivationCheckpointing, PeakActivationBytesFallAsMoreBlocksAreCheckpointed) {
  for (bool sharded : {false, true}) {
    const int64_t none = peak_step_bytes(0, sharded);
    const int64_t every_other = peak_step_bytes(2, sharded);
    const int64_t all = peak_step_bytes(1, sharded);
    const std::string where = sharded ? "FSDP units" : "fsdp::Checkpointed blocks";
    EXPECT_LT(every_other, none) << where;
    EXPECT_LT(all, every_other) << where;
    // Activations dominate this step: checkpointing every block keeps the
    // blocks' inputs and one block's internals, well under half.
    EXPECT_LT(all * 2, none) << where << ": " << all << " vs " << none << " bytes";
  }
}

TEST(CpuAllocationCounter, CountsTensorBytesAliveAndAtPeak) {
  auto& counter = CpuAllocationCounter::install();
  const int64_t before = counter.current_bytes();
  counter.reset_peak();
  {
    at::Tensor a = at::empty({1000}, at::kFloat);
    at::Tensor b = at::empty({500}, at::kDouble);
    EXPECT_EQ(counter.current_bytes() - before, 8000);
  }
  EXPECT_EQ(counter.current_bytes(), before);
  EXPECT_EQ(counter.peak_bytes() - before, 8000);
  counter.reset_peak();
  EXPECT_EQ(counter.peak_bytes(), before);
}

}  // namespace
}  // namespace fsdp::testing
