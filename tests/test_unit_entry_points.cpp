// Ways into a unit other than the root's forward, as FSDP2 has them:
//  - a unit's forward called on its own, outside the root's forward (an
//    encoder evaluated by itself), with and without grad;
//  - another method of the wrapped module run with the unit's full
//    parameters (ShardedImpl::call, FSDP2's register_fsdp_forward_method).
// Each is checked against the same calls on the model in one process.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "fsdp/fsdp.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int64_t kGlobalBatch = 12;  // divisible by world sizes 1-4

class EncoderImpl : public torch::nn::Module {
 public:
  EncoderImpl() {
    a = register_module("a", torch::nn::Linear(5, 9));
    b = register_module("b", torch::nn::Linear(9, 7));
  }
  at::Tensor forward(const at::Tensor& x) { return at::tanh(b->forward(at::tanh(a->forward(x)))); }
  // A method other than forward that uses the parameters.
  at::Tensor embed(const at::Tensor& x, double scale) { return forward(x) * scale + a->bias.sum(); }

  torch::nn::Linear a{nullptr}, b{nullptr};
};
TORCH_MODULE(Encoder);

// An encoder and a head, each a unit when `units`, in a root with a
// parameter of its own.
class EncoderHeadImpl : public torch::nn::Module {
 public:
  explicit EncoderHeadImpl(bool units) {
    if (units) {
      encoder = register_module("encoder", Sharded<Encoder>(Encoder()));
      head = register_module("head", Sharded<torch::nn::Linear>(torch::nn::Linear(7, 3)));
    } else {
      plain_encoder = register_module("encoder", Encoder());
      plain_head = register_module("head", torch::nn::Linear(7, 3));
    }
    bias = register_parameter("bias", at::full({3}, 0.1));
  }
  at::Tensor encode(const at::Tensor& x) { return encoder ? encoder->forward(x) : plain_encoder->forward(x); }
  at::Tensor embed(const at::Tensor& x, double scale) {
    return encoder ? encoder->call(&EncoderImpl::embed, x, scale) : plain_encoder->embed(x, scale);
  }
  at::Tensor apply_head(const at::Tensor& h) { return head ? head->forward(h) : plain_head->forward(h); }
  at::Tensor forward(const at::Tensor& x) { return apply_head(encode(x)) + bias; }

  Sharded<Encoder> encoder{nullptr};
  Sharded<torch::nn::Linear> head{nullptr};
  Encoder plain_encoder{nullptr};
  torch::nn::Linear plain_head{nullptr};
  at::Tensor bias;
};
TORCH_MODULE(EncoderHead);

struct Data {
  at::Tensor inputs;   // [steps, batch, 5]
  at::Tensor targets;  // [steps, batch, 3]
};

Data make_data(int steps) {
  at::manual_seed(41);
  return {at::randn({steps, kGlobalBatch, 5}), at::randn({steps, kGlobalBatch, 3})};
}

// The losses of one step of each kind, on a model (the reference, or the
// root fully_shard returned) and the module inside it whose units are called.
at::Tensor encoder_only_loss(EncoderHead& inner, const at::Tensor& x) {
  return inner->encode(x).pow(2).mean();
}
at::Tensor method_loss(EncoderHead& inner, const at::Tensor& x, const at::Tensor& y) {
  return at::mse_loss(inner->apply_head(inner->embed(x, 0.5)), y);
}

// Step s: 0 the encoder alone, 1 a method and the head called by the user,
// 2 the whole model through the root; and again.
template <class Model>
at::Tensor step_loss(Model& model, EncoderHead& inner, int step, const at::Tensor& x, const at::Tensor& y) {
  switch (step % 3) {
    case 0: return encoder_only_loss(inner, x);
    case 1: return method_loss(inner, x, y);
    default: return at::mse_loss(model->forward(x), y);
  }
}

class UnitEntryPoints : public ::testing::TestWithParam<ShardingStrategy> {};

TEST_P(UnitEntryPoints, UnitsCalledOnTheirOwnTrainLikeOneProcess) {
  constexpr int kSteps = 6;
  const Data data = make_data(kSteps);
  at::manual_seed(42);
  EncoderHead reference(false);
  EncoderHead initial(true);
  copy_state(*initial, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kSgdMomentum, reference->parameters());
  const std::vector<double> ref_losses = train_steps(*ref_opt, kSteps, [&](int s) {
    return step_loss(reference, reference, s, data.inputs[s], data.targets[s]);
  });

  run_ranks(3, [&](RankContext& ctx) {
    EncoderHead local(true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(GetParam()));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(data.inputs[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(data.targets[step], ctx.rank, ctx.world_size);
      opt->zero_grad();
      at::Tensor loss = step_loss(model, local, step, x, y);
      loss.backward();
      opt->step();
      const std::string where = rank_str(ctx) + " step " + std::to_string(step);
      EXPECT_LT(relative_diff(global_mean(*ctx.group, loss.item<double>()), ref_losses[step]), 1e-5) << where;
      EXPECT_EQ(memory_stats(*model).gathered_units, 0) << where << ": a unit stayed gathered";
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-6, rank_str(ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, UnitEntryPoints,
                         ::testing::Values(ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                           ShardingStrategy::kNoShard),
                         [](const ::testing::TestParamInfo<ShardingStrategy>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(UnitEntryPoints, EvaluationOfOneUnitGathersAndFrees) {
  const Data data = make_data(1);
  at::manual_seed(43);
  EncoderHead reference(false);
  EncoderHead initial(true);
  copy_state(*initial, *reference);
  at::Tensor expected_encoding, expected_embedding;
  {
    at::NoGradGuard no_grad;
    expected_encoding = reference->encode(data.inputs[0]);
    expected_embedding = reference->embed(data.inputs[0], 2.0);
  }
  run_ranks(2, [&](RankContext& ctx) {
    EncoderHead local(true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    at::NoGradGuard no_grad;
    reset_peak_memory_stats(*model);
    at::Tensor encoding = local->encoder->forward(data.inputs[0]);
    at::Tensor embedding = local->encoder->call(&EncoderImpl::embed, data.inputs[0], 2.0);
    EXPECT_TRUE(at::allclose(encoding, expected_encoding, 1e-6, 1e-7)) << rank_str(ctx);
    EXPECT_TRUE(at::allclose(embedding, expected_embedding, 1e-6, 1e-7)) << rank_str(ctx);
    const MemoryStats stats = memory_stats(*model);
    EXPECT_EQ(stats.peak_gathered_units, 1) << "only the encoder was gathered";
    EXPECT_EQ(stats.gathered_units, 0) << "and freed after";
  });
}

}  // namespace
}  // namespace fsdp::testing
