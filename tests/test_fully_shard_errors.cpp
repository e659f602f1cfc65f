// Misuse turns into clear errors, never hangs:
//  - a model that differs across ranks: every rank throws, naming the first
//    difference;
//  - optimizer.step() between forward and backward: an error that says so;
//  - a nested unit's forward called outside the root: an error;
//  - parameters tied across units, a module wrapped twice, a model sharded
//    twice, a unit sharded by another model, a non-floating parameter or
//    mixed dtypes in one unit: errors at fully_shard that name the fix.
// The tied LM head inside one unit is covered by the GPT parity tests.

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

// -- models differing across ranks -------------------------------------------

TEST(DifferentModelsAcrossRanks, DifferentWidthNamesTheParameter) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(7, ctx.rank == 1 ? 11 : 10, 3, true);
    try {
      fully_shard(local, FullyShardOptions(ctx.group));
      ADD_FAILURE() << rank_str(ctx) << ": no error";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("the model differs across ranks"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 0 has parameter 'layers.4.weight' [3, 10]"), std::string::npos)
          << what;
      EXPECT_NE(what.find("rank 1 has parameter 'layers.4.weight' [3, 11]"), std::string::npos)
          << what;
      EXPECT_NE(what.find("Every rank must build the same model"), std::string::npos) << what;
    }
  }, quick());
}

TEST(DifferentModelsAcrossRanks, ExtraLayerOnOneRankNamesIt) {
  run_ranks(3, [](RankContext& ctx) {
    auto config = tiny_gpt_config(true);
    if (ctx.rank == 2) config.n_layer = 3;
    models::GPT local(config);
    try {
      fully_shard(local, FullyShardOptions(ctx.group));
      ADD_FAILURE() << rank_str(ctx) << ": no error";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("differs across ranks"), std::string::npos) << what;
      EXPECT_NE(what.find("rank 2 has unit 'blocks.2'"), std::string::npos) << what;
    }
  }, quick());
}

TEST(DifferentModelsAcrossRanks, DifferentDtypeNamesTheFirstParameter) {
  run_ranks(2, [](RankContext& ctx) {
    models::GPT local(tiny_gpt_config(true));
    if (ctx.rank == 1) local->to(at::kDouble);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)),
                       "rank 1 has parameter 'wte.weight' [256, 32] Double");
  }, quick());
}

TEST(DifferentModelsAcrossRanks, FrozenOnOneRankOnly) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    if (ctx.rank == 0) local->shift.set_requires_grad(false);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)),
                       "rank 0 has parameter 'shift' [2] Float (frozen)");
  }, quick());
}

// -- optimizer.step() before backward ----------------------------------------

// A root with no parameters of its own: two units.
class UnitsOnlyImpl : public torch::nn::Module {
 public:
  UnitsOnlyImpl() {
    a = register_module("a", fsdp::Sharded<torch::nn::Linear>(torch::nn::Linear(5, 8)));
    b = register_module("b", fsdp::Sharded<torch::nn::Linear>(torch::nn::Linear(8, 2)));
  }
  at::Tensor forward(const at::Tensor& x) { return b->forward(at::tanh(a->forward(x))); }
  fsdp::Sharded<torch::nn::Linear> a{nullptr}, b{nullptr};
};
TORCH_MODULE(UnitsOnly);

// Runs one full step (so gradients exist), then forward, optimizer.step(),
// backward. The first error must name optimizer.step().
template <class Model, class Forward>
void check_step_before_backward(RankContext& ctx, Model& model, Forward forward) {
  auto opt = make_optimizer(OptimizerKind::kSgd, model->parameters());
  forward().backward();
  opt->step();
  opt->zero_grad();
  forward().backward();  // gradients to step with

  at::Tensor loss = forward();
  std::string error;
  try {
    opt->step();
  } catch (const std::exception& e) {
    error = std::string("optimizer.step() itself threw: ") + e.what();
  }
  if (error.empty()) {
    try {
      loss.backward();
      error = "<backward did not throw>";
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("optimizer.step()"), std::string::npos)
      << rank_str(ctx) << ": the error does not name optimizer.step():\n" << error;
  EXPECT_NE(error.find("step the optimizer only after loss.backward() returns"), std::string::npos)
      << rank_str(ctx) << ": " << error;
}

// An in-place update through the parameters themselves (a hand-written SGD
// step) between forward and backward.
TEST(OptimizerBeforeBackward, HandWrittenStepThroughTheParameters) {
  run_ranks(2, [](RankContext& ctx) {
    at::manual_seed(4);
    UnitsOnly local;
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    at::Tensor x = at::randn({3, 5});
    model->forward(x).pow(2).mean().backward();  // gradients to step with
    at::Tensor loss = model->forward(x).pow(2).mean();
    {
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.sub_(0.05 * p.grad());
    }
    EXPECT_THROWS_WITH(loss.backward(),
                       "was modified in place after forward and before its backward ran (did "
                       "optimizer.step() run before backward finished?)");
  }, quick());
}

// torch::optim's own step between forward and backward. The GPT case below
// differs: its root keeps its parameters gathered from forward to backward.
TEST(OptimizerBeforeBackward, RootWithoutParameters) {
  run_ranks(2, [](RankContext& ctx) {
    at::manual_seed(4);
    UnitsOnly local;
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    at::Tensor x = at::randn({3, 5});
    check_step_before_backward(ctx, model, [&] { return model->forward(x).pow(2).mean(); });
  }, quick());
}

// The GPT's root (embeddings, final norm, tied head) keeps its parameters
// gathered from forward to backward.
TEST(OptimizerBeforeBackward, RootWithParameters) {
  run_ranks(2, [](RankContext& ctx) {
    at::manual_seed(4);
    models::GPT local(tiny_gpt_config(true));
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    at::Tensor tokens = at::randint(0, 256, {2, 16});
    check_step_before_backward(ctx, model,
                               [&] { return models::lm_loss(model->forward(tokens), tokens); });
  }, quick());
}

// -- a nested unit called directly --------------------------------------------

// Allowed, as FSDP2 allows it (tests/test_unit_entry_points.cpp checks the
// values): the call leaves no state behind.
TEST(NestedUnitForward, OutsideTheRootLeavesNoStateBehind) {
  run_ranks(2, [](RankContext& ctx) {
    at::manual_seed(4);
    Mlp local(7, 10, 3, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto unit = local->layers->ptr<fsdp::ShardedImpl<torch::nn::LinearImpl>>(0);
    ASSERT_NE(unit, nullptr);
    at::Tensor x = at::randn({2, 7});
    EXPECT_EQ(unit->forward(x).sizes(), (std::vector<int64_t>{2, 10}));
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0) << rank_str(ctx);
    // Training still works.
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    for (int step = 0; step < 2; ++step) {
      at::Tensor loss = model->forward(x).pow(2).mean();
      opt->zero_grad();
      EXPECT_NO_THROW(loss.backward()) << rank_str(ctx);
      opt->step();
    }
    EXPECT_EQ(memory_stats(*model).gathered_param_bytes, 0) << rank_str(ctx);
  }, quick());
}

// See [Note: a unit outliving its root] in src/unit_state.h.
TEST(NestedUnitForward, AfterTheModelIsDestroyedIsAnError) {
  run_ranks(
      2,
      [](RankContext& ctx) {
        std::shared_ptr<fsdp::ShardedImpl<torch::nn::LinearImpl>> unit;
        {
          Mlp local(7, 10, 3, true);
          auto model = fully_shard(local, FullyShardOptions(ctx.group));
          unit = local->layers->ptr<fsdp::ShardedImpl<torch::nn::LinearImpl>>(0);
          ASSERT_NE(unit, nullptr);
        }
        EXPECT_THROWS_WITH(
            unit->forward(at::randn({2, 7})),
            "fsdp: unit 'layers.0' was used after the model fully_shard returned was "
            "destroyed; keep the model alive while any of its units is in use");
      },
      quick());
}

// -- tied, wrapped twice, non-floating ----------------------------------------

// y = x W^T with a weight handed in, so two modules can share one tensor.
class SharedWeightLinearImpl : public torch::nn::Module {
 public:
  explicit SharedWeightLinearImpl(at::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  at::Tensor forward(const at::Tensor& x) { return at::matmul(x, weight.t()); }
  at::Tensor weight;
};
TORCH_MODULE(SharedWeightLinear);

// Two children, `first` then `second`, run in sequence. A root with a plain
// forward (Sequential's forward is a template, which Sharded<> cannot wrap).
class PairImpl : public torch::nn::Module {
 public:
  template <class A, class B>
  PairImpl(A a, B b) {
    register_module("first", a.ptr());
    register_module("second", b.ptr());
    first_ = [a](const at::Tensor& x) mutable { return a->forward(x); };
    second_ = [b](const at::Tensor& x) mutable { return b->forward(x); };
  }
  at::Tensor forward(const at::Tensor& x) { return second_(first_(x)); }

 private:
  std::function<at::Tensor(const at::Tensor&)> first_, second_;
};
TORCH_MODULE(Pair);

TEST(TiedParams, AcrossSiblingUnitsIsAnErrorThatSaysHowToFixIt) {
  run_ranks(2, [](RankContext& ctx) {
    at::Tensor w = at::randn({4, 4});
    Pair pair{fsdp::Sharded<SharedWeightLinear>(SharedWeightLinear(w)),
              fsdp::Sharded<SharedWeightLinear>(SharedWeightLinear(w))};
    try {
      fully_shard(pair, FullyShardOptions(ctx.group));
      ADD_FAILURE() << "rank " << ctx.rank << ": tying across units did not throw";
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("parameter 'first.weight' (also reachable as 'second.weight')"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("shared by units 'first' and 'second'"), std::string::npos) << what;
      EXPECT_NE(what.find("Tied parameters must live in one unit"), std::string::npos) << what;
      EXPECT_NE(what.find("do not wrap the tied submodules as separate units"), std::string::npos)
          << what;
    }
  });
}

// A head unit tied to the root's embedding: the tie crosses units too.
TEST(TiedParams, BetweenRootAndUnitIsAnError) {
  run_ranks(1, [](RankContext& ctx) {
    torch::nn::Linear embed(4, 4);
    Pair pair(embed, fsdp::Sharded<SharedWeightLinear>(SharedWeightLinear(embed->weight)));
    EXPECT_THROWS_WITH(fully_shard(pair, FullyShardOptions(ctx.group)),
                       "is shared by units '<root>' and 'second'");
  });
}

TEST(WrapErrors, OneModuleWrappedTwiceIsSharedByTwoUnits) {
  run_ranks(1, [](RankContext& ctx) {
    torch::nn::Linear lin(3, 3);
    Pair pair{fsdp::Sharded<torch::nn::Linear>(lin), fsdp::Sharded<torch::nn::Linear>(lin)};
    EXPECT_THROWS_WITH(fully_shard(pair, FullyShardOptions(ctx.group)),
                       "is shared by units 'first' and 'second'");
  });
}

TEST(WrapErrors, OneUnitRegisteredTwiceIsAnError) {
  run_ranks(1, [](RankContext& ctx) {
    fsdp::Sharded<torch::nn::Linear> unit(torch::nn::Linear(3, 3));
    Pair pair(unit, unit);
    EXPECT_THROWS_WITH(fully_shard(pair, FullyShardOptions(ctx.group)),
                       "unit 'second' appears twice in the model");
  });
}

TEST(WrapErrors, FullyShardTwiceIsAnError) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(4, 5, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    EXPECT_THROWS_WITH(fully_shard(model, FullyShardOptions(ctx.group)),
                       "this model is already sharded; call fully_shard once");
    // The model still trains after the refused call.
    at::Tensor x = at::randn({2, 4});
    EXPECT_NO_THROW(model->forward(x).sum().backward());
  });
}

TEST(WrapErrors, AUnitShardedByAnotherModelIsAnError) {
  run_ranks(1, [](RankContext& ctx) {
    fsdp::Sharded<torch::nn::Linear> unit(torch::nn::Linear(3, 3));
    auto first = fully_shard(Pair(unit, torch::nn::Linear(3, 3)),
                             FullyShardOptions(ctx.group));
    Pair second(unit, torch::nn::Linear(3, 3));
    EXPECT_THROWS_WITH(fully_shard(second, FullyShardOptions(ctx.group)),
                       "unit 'first' is already sharded (by another fully_shard call)");
  });
}

class IntParamImpl : public torch::nn::Module {
 public:
  IntParamImpl() {
    lin = register_module("lin", torch::nn::Linear(3, 3));
    steps = register_parameter("steps", at::zeros({2}, at::kLong), /*requires_grad=*/false);
  }
  at::Tensor forward(const at::Tensor& x) { return lin->forward(x); }
  torch::nn::Linear lin{nullptr};
  at::Tensor steps;
};
TORCH_MODULE(IntParam);

TEST(WrapErrors, NonFloatingParameterIsNamed) {
  run_ranks(2, [](RankContext& ctx) {
    Pair pair{fsdp::Sharded<IntParam>(IntParam()), torch::nn::Linear(3, 3)};
    EXPECT_THROWS_WITH(fully_shard(pair, FullyShardOptions(ctx.group)),
                       "parameter 'first.steps' has dtype Long; only floating-point parameters "
                       "can be sharded (register integer state as a buffer instead)");
  });
}

TEST(WrapErrors, MixedDtypesInOneUnitAreNamed) {
  run_ranks(1, [](RankContext& ctx) {
    torch::nn::Linear a(3, 3), b(3, 3);
    b->to(at::kDouble);
    Pair pair{fsdp::Sharded<Pair>(Pair(a, b)), torch::nn::Tanh()};
    EXPECT_THROWS_WITH(fully_shard(pair, FullyShardOptions(ctx.group)),
                       "parameters of one unit must share a dtype, but 'first.first.weight' is "
                       "Float and 'first.second.weight' is Double");
  });
}

}  // namespace
}  // namespace fsdp::testing
