// Activation checkpointing (fsdp::Checkpointed<M> and
// UnitModule::set_activation_checkpointing) on its own: the recomputation,
// its RNG, its errors, where it meets unit boundaries, and the memory it
// saves, counted at the allocator. Training under FSDP with it is in
// test_activation_checkpointing_fsdp.cpp.
//
// The reference for a checkpointed run is the same run without
// checkpointing: the recomputation computes the same values, so on the CPU
// every gradient must be bitwise equal.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>

#include <string>
#include <vector>

#include "fsdp/fsdp.h"
#include "harness/bitwise.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int64_t kGlobalBatch = 12;  // divisible by world sizes 1-4

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
  at::Tensor inputs = at::randn({kGlobalBatch, 4});
  run_ranks(2, [&](RankContext& ctx) {
    std::vector<std::vector<at::Tensor>> grads;
    for (bool checkpointed : {false, true}) {
      torch::nn::Sequential local = make(checkpointed);
      copy_state(*local, *initial);
      auto model = fully_shard(local, FullyShardOptions(ctx.group));
      model->forward(local_rows(inputs, ctx.rank, 2)).pow(2).sum().backward();
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
