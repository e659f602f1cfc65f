// Host synchronizations in backward. Every gradient reduction carries one
// used-parameter flag per parameter ([Note: unused-parameter flags]). On CUDA,
// copying the flags to the device, or the reduced counts back, makes the host
// wait for the GPU, which stops it from queuing work ahead. These tests count
// those copies (UnitInfo::flag_transfers) on the CPU path, which is the same
// code: a unit copies its flags once, and again only when its pattern of used
// parameters changes, and reads the counts back only on a step that left one
// of its trainable parameters without a gradient.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 4;

// One training step on this rank's rows of step `step`'s global batch.
template <class Model>
void mse_step(Model& model, torch::optim::Optimizer& opt, const at::Tensor& inputs,
              const at::Tensor& targets, int step, const RankContext& ctx) {
  at::Tensor loss = at::mse_loss(model->forward(local_rows(inputs[step], ctx.rank, ctx.world_size)),
                                 local_rows(targets[step], ctx.rank, ctx.world_size));
  opt.zero_grad();
  loss.backward();
  opt.step();
}

std::map<std::string, int64_t> transfers_by_unit(const UnitModule& model) {
  std::map<std::string, int64_t> transfers;
  for (const auto& info : unit_infos(model)) transfers[info.name] = info.flag_transfers;
  return transfers;
}

TEST(HostSyncs, AUnitWhoseParametersAreAllUsedCopiesItsFlagsOnce) {
  const auto config = tiny_gpt_config(true);
  at::manual_seed(61);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, 12, config.context});
  struct Case {
    int world_size;
    MixedPrecisionPolicy mp;  // at one rank, bf16 makes the units reduce at all
  };
  for (const Case& c : {Case{1, MixedPrecisionPolicy().param_dtype(at::kBFloat16)},
                        Case{2, MixedPrecisionPolicy()}, Case{3, MixedPrecisionPolicy()}}) {
    run_ranks(c.world_size, [&](RankContext& ctx) {
      auto model = fully_shard(models::GPT(config), FullyShardOptions(ctx.group).mp(c.mp));
      auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
      for (int step = 0; step < kSteps; ++step) {
        lm_train_step(model, *opt, local_rows(tokens[step], ctx.rank, ctx.world_size));
        for (const auto& [unit, transfers] : transfers_by_unit(*model)) {
          EXPECT_EQ(transfers, 1) << "ws " << c.world_size << " step " << step << " unit '" << unit
                                  << "': only the first reduction should copy the flags";
        }
      }
    });
  }
}

// A unit with a frozen bias, a unit frozen whole, and a root whose weight is
// frozen.
class PartlyFrozenImpl : public torch::nn::Module {
 public:
  PartlyFrozenImpl() {
    torch::nn::Linear first(6, 6), second(6, 6);
    first->bias.set_requires_grad(false);
    for (auto& p : second->parameters()) p.set_requires_grad(false);
    a = register_module("a", Sharded<torch::nn::Linear>(first));
    b = register_module("b", Sharded<torch::nn::Linear>(second));
    head = register_module("head", torch::nn::Linear(6, 2));
    head->weight.set_requires_grad(false);
  }
  at::Tensor forward(const at::Tensor& x) {
    return head->forward(at::tanh(b->forward(at::tanh(a->forward(x)))));
  }
  Sharded<torch::nn::Linear> a{nullptr}, b{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(PartlyFrozen);

TEST(HostSyncs, FrozenParametersDoNotMakeFurtherCopies) {
  at::manual_seed(62);
  at::Tensor inputs = at::randn({kSteps, 6, 6});
  at::Tensor targets = at::randn({kSteps, 6, 2});
  run_ranks(2, [&](RankContext& ctx) {
    auto model = fully_shard(PartlyFrozen(), FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      mse_step(model, *opt, inputs, targets, step, ctx);
      const auto transfers = transfers_by_unit(*model);
      EXPECT_EQ(transfers.at(""), 1) << "step " << step;
      EXPECT_EQ(transfers.at("a"), 1) << "step " << step;
      EXPECT_EQ(transfers.at("b"), 0) << "step " << step << ": a frozen unit reduces nothing";
    }
  });
}

class GatedNetImpl : public torch::nn::Module {
 public:
  GatedNetImpl() {
    Gated inner;
    use_b = inner->use_b;
    gated = register_module("gated", Sharded<Gated>(inner));
    head = register_module("head", torch::nn::Linear(6, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return head->forward(gated->forward(x)); }
  Sharded<Gated> gated{nullptr};
  torch::nn::Linear head{nullptr};
  std::shared_ptr<bool> use_b;
};
TORCH_MODULE(GatedNet);

TEST(HostSyncs, AChangedPatternCopiesTheFlagsAgainAndAnUnusedParameterReadsTheCounts) {
  // Per step: is gated.b used; and how many copies the unit `gated` makes:
  // the first flags; none; the new flags plus the counts (b has no gradient
  // here, and only the counts say whether another rank used it); the counts.
  constexpr bool kUseB[kSteps] = {true, true, false, false};
  constexpr int64_t kExpected[kSteps] = {1, 0, 2, 1};
  at::manual_seed(63);
  at::Tensor inputs = at::randn({kSteps, 6, 6});
  at::Tensor targets = at::randn({kSteps, 6, 2});
  run_ranks(2, [&](RankContext& ctx) {
    GatedNet local;
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    int64_t before = 0;
    for (int step = 0; step < kSteps; ++step) {
      *local->use_b = kUseB[step];
      mse_step(model, *opt, inputs, targets, step, ctx);
      const int64_t now = transfers_by_unit(*model).at("gated");
      EXPECT_EQ(now - before, kExpected[step]) << "step " << step;
      before = now;
    }
  });
}

}  // namespace
}  // namespace fsdp::testing
