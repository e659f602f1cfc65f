// Recovery after an exception in the middle of a step ([Note: recovery
// after an exception]): when every rank throws, in a unit's forward, in the
// user's code between forward and backward, or in backward, and the caller
// catches it, the model is back to shards only with nothing in flight, and
// the following steps train exactly like a reference that skipped the
// failed step. When only one rank throws, its peers fail in their next
// collective within the timeout, with an error naming the operation and the
// peer.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "fsdp/fsdp.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 4;
constexpr int kFailedStep = 1;
constexpr int64_t kGlobalBatch = 12;

enum class Fault { kNone, kForward, kBeforeBackward, kBackward };

const char* to_string(Fault fault) {
  switch (fault) {
    case Fault::kNone: return "none";
    case Fault::kForward: return "forward";
    case Fault::kBeforeBackward: return "before_backward";
    case Fault::kBackward: return "backward";
  }
  return "?";
}

// Identity forward whose backward throws.
class ThrowInBackward : public torch::autograd::Function<ThrowInBackward> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list) {
    throw std::runtime_error("injected failure in backward");
  }
};

// A Linear layer that throws where `fault` says, while armed.
class FaultyImpl : public torch::nn::Module {
 public:
  explicit FaultyImpl(std::shared_ptr<Fault> fault) : fault_(std::move(fault)) {
    fc = register_module("fc", torch::nn::Linear(8, 8));
  }
  at::Tensor forward(const at::Tensor& x) {
    if (*fault_ == Fault::kForward) throw std::runtime_error("injected failure in forward");
    at::Tensor y = at::tanh(fc->forward(x));
    return *fault_ == Fault::kBackward ? ThrowInBackward::apply(y) : y;
  }
  torch::nn::Linear fc{nullptr};

 private:
  std::shared_ptr<Fault> fault_;
};
TORCH_MODULE(Faulty);

// in -> a -> faulty -> c, each a unit when `units`.
class ThreeLayersImpl : public torch::nn::Module {
 public:
  ThreeLayersImpl(bool units, std::shared_ptr<Fault> fault) {
    layers = register_module("layers", torch::nn::Sequential());
    if (units) {
      layers->push_back(Sharded<torch::nn::Linear>(torch::nn::Linear(6, 8)));
      layers->push_back(Sharded<Faulty>(Faulty(fault)));
      layers->push_back(Sharded<torch::nn::Linear>(torch::nn::Linear(8, 3)));
    } else {
      layers->push_back(torch::nn::Linear(6, 8));
      layers->push_back(Faulty(fault));
      layers->push_back(torch::nn::Linear(8, 3));
    }
  }
  at::Tensor forward(const at::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};
TORCH_MODULE(ThreeLayers);

struct RecoveryCase {
  Fault fault;
  ShardingStrategy strategy;
  bool keep_gathered;  // reshard_after_forward(false)
};

std::string case_name(const ::testing::TestParamInfo<RecoveryCase>& info) {
  return std::string(to_string(info.param.fault)) + "_" + to_string(info.param.strategy) +
         (info.param.keep_gathered ? "_keep_gathered" : "");
}
void PrintTo(const RecoveryCase& c, std::ostream* os) { *os << case_name({c, 0}); }

class ExceptionRecovery : public ::testing::TestWithParam<RecoveryCase> {};

TEST_P(ExceptionRecovery, NextStepsTrainLikeAReferenceThatSkippedTheFailedStep) {
  const RecoveryCase c = GetParam();
  at::manual_seed(51);
  at::Tensor inputs = at::randn({kSteps, kGlobalBatch, 6});
  at::Tensor targets = at::randn({kSteps, kGlobalBatch, 3});
  auto no_fault = std::make_shared<Fault>(Fault::kNone);
  ThreeLayers reference(false, no_fault);
  ThreeLayers initial(true, no_fault);
  copy_state(*initial, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kSgdMomentum, reference->parameters());
  std::vector<double> ref_losses;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kFailedStep) continue;
    ref_losses.push_back(train_steps(*ref_opt, 1, [&](int) {
                           return at::mse_loss(reference->forward(inputs[step]), targets[step]);
                         })[0]);
  }

  run_ranks(2, [&](RankContext& ctx) {
    auto fault = std::make_shared<Fault>(Fault::kNone);
    ThreeLayers local(true, fault);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group)
                                        .strategy(c.strategy)
                                        .reshard_after_forward(!c.keep_gathered));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    std::vector<double> losses;
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(inputs[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
      *fault = step == kFailedStep ? c.fault : Fault::kNone;
      opt->zero_grad();
      try {
        at::Tensor loss = at::mse_loss(model->forward(x), y);
        if (*fault == Fault::kBeforeBackward) throw std::runtime_error("injected failure: the loss check");
        loss.backward();
        opt->step();
        losses.push_back(global_mean(*ctx.group, loss.item<double>()));
      } catch (const std::exception& e) {
        ASSERT_EQ(step, kFailedStep) << rank_str(ctx) << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
        const MemoryStats stats = memory_stats(*model);
        EXPECT_EQ(stats.gathered_units, 0) << rank_str(ctx) << ": a unit stayed gathered";
        EXPECT_EQ(stats.gathered_param_bytes, 0) << rank_str(ctx);
      }
    }
    ASSERT_EQ(losses.size(), ref_losses.size());
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_LT(relative_diff(losses[i], ref_losses[i]), 1e-5) << rank_str(ctx) << " loss " << i;
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-6, rank_str(ctx));
  });
}

std::vector<RecoveryCase> recovery_cases() {
  std::vector<RecoveryCase> cases;
  for (Fault fault : {Fault::kForward, Fault::kBeforeBackward, Fault::kBackward}) {
    for (auto strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard}) {
      cases.push_back({fault, strategy, false});
    }
    cases.push_back({fault, ShardingStrategy::kFullShard, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Faults, ExceptionRecovery, ::testing::ValuesIn(recovery_cases()), case_name);

// One rank throws and stops; the other, still in the step, fails in its
// next collective within the timeout, naming the operation and the rank it
// waited for.
TEST(ExceptionRecoveryOnOneRank, PeersFailWithinTheTimeoutNamingTheRank) {
  at::manual_seed(52);
  at::Tensor x = at::randn({kGlobalBatch, 6});
  RankRunOptions options = quick();
  options.comm_timeout = std::chrono::milliseconds(3000);
  run_ranks(2, [&](RankContext& ctx) {
    auto fault = std::make_shared<Fault>(ctx.rank == 0 ? Fault::kForward : Fault::kNone);
    ThreeLayers local(true, fault);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    const auto start = std::chrono::steady_clock::now();
    try {
      model->forward(local_rows(x, ctx.rank, 2)).sum().backward();
      FAIL() << rank_str(ctx) << " finished a step its peer abandoned";
    } catch (const std::exception& e) {
      const std::string message = e.what();
      if (ctx.rank == 0) {
        EXPECT_NE(message.find("injected failure in forward"), std::string::npos) << message;
        EXPECT_EQ(memory_stats(*model).gathered_units, 0);
        return;  // this rank stops, as a program would
      }
      EXPECT_NE(message.find("all_gather"), std::string::npos) << message;  // the operation
      EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
      EXPECT_NE(message.find("timeout 3000 ms"), std::string::npos) << message;
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << message;
    }
  }, options);
}

}  // namespace
}  // namespace fsdp::testing
