// Gradient accumulation, both ways, against one process accumulating the
// same micro-batches (each loss scaled by 1/M):
//  - sync every micro-batch: each backward reduce-scatters, and the sharded
//    gradients accumulate;
//  - no sync (fsdp::NoSyncGuard, or set_requires_gradient_sync(false)) for
//    all but the last micro-batch: full gradients accumulate locally, and the
//    last backward reduces them all.
// 3 steps x 3 micro-batches; losses every step and final shards within 1e-5
// (the GPT with AdamW in float64: see check_accumulation).

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int kMicro = 3;
constexpr int64_t kMicroBatch = 6;  // rows per micro-batch, divisible by 1, 2, 3
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;  // see test_fully_shard_parity.cpp on Adam near zero

enum class Mode { kSyncEach, kNoSyncGuard, kSetRequiresSync };

const char* to_string(Mode m) {
  switch (m) {
    case Mode::kSyncEach: return "SyncEach";
    case Mode::kNoSyncGuard: return "NoSyncGuard";
    case Mode::kSetRequiresSync: return "SetRequiresGradientSync";
  }
  return "?";
}

struct AccumCase {
  std::string model;  // "mlp" or "gpt"
  int world_size;
  Mode mode;
  OptimizerKind optimizer;
  ShardingStrategy strategy;
};

std::string case_name(const ::testing::TestParamInfo<AccumCase>& info) {
  const auto& c = info.param;
  return c.model + "_ws" + std::to_string(c.world_size) + "_" + to_string(c.mode) + "_" +
         to_string(c.optimizer) + "_" + fsdp::to_string(c.strategy);
}

// ctest lists each case with its parameter: print it as the case name.
void PrintTo(const AccumCase& c, std::ostream* os) { *os << case_name({c, 0}); }

template <class Holder, class MakeModel, class LossFn>
void check_accumulation(const AccumCase& c, MakeModel make_model, const at::Tensor& inputs,
                        const at::Tensor& targets, LossFn loss_fn) {
  // inputs, targets: [steps, micro, rows, ...]
  // The GPT with AdamW runs in float64. Adam divides by sqrt(v), so an
  // element whose gradient nearly cancels across the batch turns the fp32
  // rounding of either run's summation order into updates of up to lr; which
  // elements cross 1e-5 after 9 micro-batches depends on the BLAS kernels of
  // the machine. In float64 that noise is 1e-9 times smaller, so the bounds
  // below check the accumulation logic itself on any machine.
  const at::ScalarType dtype =
      c.model == "gpt" && c.optimizer == OptimizerKind::kAdamW ? at::kDouble : at::kFloat;
  at::manual_seed(77);
  Holder reference = make_model(false);
  Holder initial = make_model(true);
  reference->to(dtype);
  initial->to(dtype);
  copy_state(*initial, *reference);

  auto ref_opt = make_optimizer(c.optimizer, reference->parameters());
  std::vector<double> ref_losses;
  for (int step = 0; step < kSteps; ++step) {
    ref_opt->zero_grad();
    double total = 0;
    for (int m = 0; m < kMicro; ++m) {
      at::Tensor loss = loss_fn(reference->forward(inputs[step][m]), targets[step][m]) / kMicro;
      loss.backward();
      total += loss.item<double>();
    }
    ref_opt->step();
    ref_losses.push_back(total);
  }

  run_ranks(c.world_size, [&](RankContext& ctx) {
    Holder local = make_model(true);
    local->to(dtype);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
    auto opt = make_optimizer(c.optimizer, model->parameters());
    const std::string who = "rank " + std::to_string(ctx.rank);
    for (int step = 0; step < kSteps; ++step) {
      opt->zero_grad();
      double total = 0;
      for (int m = 0; m < kMicro; ++m) {
        at::Tensor x = local_rows(inputs[step][m], ctx.rank, ctx.world_size);
        at::Tensor y = local_rows(targets[step][m], ctx.rank, ctx.world_size);
        const bool last = m == kMicro - 1;
        auto run_micro_batch = [&] {
          at::Tensor loss = loss_fn(model->forward(x), y) / kMicro;
          loss.backward();
          total += loss.item<double>();
        };
        if (c.mode == Mode::kNoSyncGuard && !last) {
          NoSyncGuard no_sync(*model);
          run_micro_batch();
        } else if (c.mode == Mode::kSetRequiresSync) {
          model->set_requires_gradient_sync(last);
          run_micro_batch();
        } else {
          run_micro_batch();
        }
        if (c.mode != Mode::kSyncEach && !last && ctx.world_size > 1 &&
            c.strategy == ShardingStrategy::kFullShard) {
          // Unsynchronized: the full gradients stay on the parameters, so
          // more than this rank's shard of gradient bytes is held.
          const MemoryStats stats = memory_stats(*model);
          EXPECT_GT(stats.sharded_grad_bytes, stats.sharded_param_bytes)
              << who << " step " << step << " micro-batch " << m
              << ": expected unsharded gradients to be held locally";
        }
      }
      opt->step();
      const double global = global_mean(*ctx.group, total);
      EXPECT_LE(relative_diff(global, ref_losses[step]), kRtol)
          << who << " step " << step << ": fsdp " << global << " vs reference " << ref_losses[step];
    }
    expect_shards_match(*model, *reference, kRtol, kAtol, who);
  });
}

class GradAccumulation : public ::testing::TestWithParam<AccumCase> {};

TEST_P(GradAccumulation, MatchesSingleProcessAccumulation) {
  const AccumCase& c = GetParam();
  at::manual_seed(2024);
  with_parity_model(c.model, {kSteps, kMicro, kMicroBatch}, [&](auto make_model, auto... data) {
    check_accumulation<decltype(make_model(true))>(c, make_model, data...);
  });
}

std::vector<AccumCase> accumulation_cases() {
  std::vector<AccumCase> cases;
  for (const char* model : {"mlp", "gpt"}) {
    for (int ws : {2, 3}) {
      for (Mode mode : {Mode::kSyncEach, Mode::kNoSyncGuard, Mode::kSetRequiresSync}) {
        for (auto opt : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdamW}) {
          cases.push_back({model, ws, mode, opt, ShardingStrategy::kFullShard});
        }
      }
    }
  }
  // The other strategies accumulate differently (ZeRO-2 keeps parameters
  // gathered; NO_SHARD all-reduces full gradients in place).
  for (auto strategy : {ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
    for (Mode mode : {Mode::kSyncEach, Mode::kNoSyncGuard}) {
      cases.push_back({"gpt", 2, mode, OptimizerKind::kAdamW, strategy});
      cases.push_back({"mlp", 3, mode, OptimizerKind::kSgdMomentum, strategy});
    }
  }
  // One rank: nothing to reduce either way.
  cases.push_back({"gpt", 1, Mode::kNoSyncGuard, OptimizerKind::kAdamW, ShardingStrategy::kFullShard});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Core, GradAccumulation, ::testing::ValuesIn(accumulation_cases()),
                         case_name);

// Gradients accumulate onto whatever .grad() holds between backwards, also a
// tensor the user put there in place of FSDP's own (that takes the
// per-parameter path of [Note: gradient reduction without per-parameter
// work]; the other parameters' accumulation stays on the flat one).
TEST(GradAccumulationReplacedGrad, AccumulatesOntoTheUsersTensor) {
  constexpr int kWorld = 2;
  at::manual_seed(78);
  at::Tensor x = at::randn({2, 4, 7});
  Mlp reference(7, 10, 3, false);
  Mlp initial(7, 10, 3, true);
  copy_state(*initial, *reference);
  auto twice_with_replaced_grad = [&](torch::nn::Module& module, auto&& forward, int rank) {
    auto opt = make_optimizer(OptimizerKind::kSgd, module.parameters());
    opt->zero_grad();
    forward(local_rows(x[0], rank, kWorld)).pow(2).mean().backward();
    at::Tensor& grad = module.named_parameters()["layers.2.weight"].mutable_grad();
    grad = grad.clone().mul_(2);  // the user's own tensor, now with other values
    forward(local_rows(x[1], rank, kWorld)).pow(2).mean().backward();
    opt->step();
  };
  // The reference: each rank's half of both batches, and the replaced
  // gradient doubled after the first, as the sharded run does.
  {
    auto opt = make_optimizer(OptimizerKind::kSgd, reference->parameters());
    opt->zero_grad();
    for (int r = 0; r < kWorld; ++r) {
      (reference->forward(local_rows(x[0], r, kWorld)).pow(2).mean() / kWorld).backward();
    }
    at::Tensor& grad = reference->named_parameters()["layers.2.weight"].mutable_grad();
    grad = grad.clone().mul_(2);
    for (int r = 0; r < kWorld; ++r) {
      (reference->forward(local_rows(x[1], r, kWorld)).pow(2).mean() / kWorld).backward();
    }
    opt->step();
  }
  run_ranks(kWorld, [&](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    twice_with_replaced_grad(*model, [&](const at::Tensor& in) { return model->forward(in); }, ctx.rank);
    expect_shards_match(*model, *reference, 1e-5, 1e-6, "rank " + std::to_string(ctx.rank));
  });
}

// NoSyncGuard restores the previous setting, also when nested.
TEST(GradAccumulationGuard, RestoresThePreviousSetting) {
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(4, 5, 2, true);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    at::Tensor x = at::randn({2, 4});
    {
      NoSyncGuard outer(*model);
      {
        NoSyncGuard inner(*model);
      }
      // Still off: a synchronizing backward here would be wrong. Verified
      // through clip_grad_norm_, which refuses unsynchronized gradients.
      model->forward(x).sum().backward();
      EXPECT_THROWS_WITH(clip_grad_norm_(*model, 1.0), "without gradient sync");
    }
    model->forward(x).sum().backward();  // on again: this one reduces
    EXPECT_NO_THROW(clip_grad_norm_(*model, 1.0));
  });
}

// Both work on any unit once fully_shard has run (test_reduction_switches.cpp
// has a nested one), and say so before.
TEST(GradAccumulationGuard, NeedsAShardedUnit) {
  Mlp local(4, 5, 2, true);
  auto* unit = dynamic_cast<UnitModule*>(local->layers->ptr(0).get());
  ASSERT_NE(unit, nullptr);
  EXPECT_THROWS_WITH(
      NoSyncGuard{*unit},
      "fsdp: NoSyncGuard needs a unit sharded by fully_shard; call it after fully_shard");
  EXPECT_THROWS_WITH(unit->set_requires_gradient_sync(false),
                     "fsdp: set_requires_gradient_sync needs a unit sharded by fully_shard");
}

}  // namespace
}  // namespace fsdp::testing
