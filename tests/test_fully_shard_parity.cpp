// Parity is the definition of correct: FSDP at world size N must train
// exactly like one process on the same global batch, step for step.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include <string>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 5;
constexpr int64_t kGlobalBatch = 12;  // divisible by world sizes 1-4
constexpr double kLossRtol = 1e-5;
// Parameters must agree within 1e-5 relative, or 1e-5 absolute for values
// near zero: Adam divides by sqrt(v), so a gradient that is zero in exact
// arithmetic (GPT's key bias: softmax ignores a constant shift) turns
// rounding noise of either run into updates of a few 1e-6.
constexpr double kParamRtol = 1e-5;
constexpr double kParamAtol = 1e-5;

struct ParityCase {
  std::string model;  // "mlp" or "gpt"
  int world_size;
  ShardingStrategy strategy;
  bool nested;  // units inside the root, or a single root unit
  OptimizerKind optimizer;
};

std::string case_name(const ::testing::TestParamInfo<ParityCase>& info) {
  const auto& c = info.param;
  return c.model + "_ws" + std::to_string(c.world_size) + "_" + to_string(c.strategy) +
         (c.nested ? "_nested_" : "_rootonly_") + to_string(c.optimizer);
}

// ctest lists each case with its parameter: print it as the case name.
void PrintTo(const ParityCase& c, std::ostream* os) { *os << case_name({c, 0}); }

// Trains a reference in one process and the same model under FSDP on
// `world_size` ranks, and compares losses every step and shards at the end.
template <class Holder, class MakeModel, class LossFn>
void check_parity(const ParityCase& c, MakeModel make_model, const at::Tensor& inputs,
                  const at::Tensor& targets, LossFn loss_fn) {
  at::manual_seed(1234);
  Holder reference = make_model(c.nested);
  Holder initial = make_model(c.nested);
  copy_state(*initial, *reference);

  auto ref_opt = make_optimizer(c.optimizer, reference->parameters());
  std::vector<double> ref_losses;
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor loss = loss_fn(reference->forward(inputs[step]), targets[step]);
    ref_opt->zero_grad();
    loss.backward();
    ref_opt->step();
    ref_losses.push_back(loss.item<double>());
  }

  run_ranks(c.world_size, [&](RankContext& ctx) {
    Holder local = make_model(c.nested);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
    auto opt = make_optimizer(c.optimizer, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(inputs[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
      at::Tensor loss = loss_fn(model->forward(x), y);
      opt->zero_grad();
      loss.backward();
      opt->step();
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref_losses[step]), kLossRtol)
          << "rank " << ctx.rank << " step " << step << ": fsdp " << global << " vs reference "
          << ref_losses[step];
    }
    expect_shards_match(*model, *reference, kParamRtol, kParamAtol,
                        "rank " + std::to_string(ctx.rank));
  });
}

class ParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(ParityTest, MatchesSingleProcessTraining) {
  const ParityCase& c = GetParam();
  at::manual_seed(99);
  with_parity_model(c.model, {kSteps, kGlobalBatch}, [&](auto make_model, auto... data) {
    check_parity<decltype(make_model(true))>(c, make_model, data...);
  });
}

std::vector<ParityCase> all_cases() {
  std::vector<ParityCase> cases;
  for (const char* model : {"mlp", "gpt"}) {
    for (int ws : {1, 2, 3, 4}) {
      for (auto strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                            ShardingStrategy::kNoShard}) {
        for (bool nested : {true, false}) {
          for (auto opt : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdamW}) {
            cases.push_back({model, ws, strategy, nested, opt});
          }
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Core, ParityTest, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
}  // namespace fsdp::testing
