// One unit over several sibling modules (FSDP2's fully_shard([a, b])):
// UnitModule::share_unit_with puts a unit's parameters in another unit's
// flat buffer. A weight tied between an embedding and an output head then
// lives in one unit that is not the root, and training matches one process
// also on steps where the head does not run (a loss that skips it).

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 12;
constexpr int64_t kVocab = 11;
constexpr int64_t kWidth = 6;

// The output head: logits from the embedding's weight, tied by registering
// the same tensor as its own parameter.
class TiedHeadImpl : public torch::nn::Module {
 public:
  explicit TiedHeadImpl(const at::Tensor& weight) { this->weight = register_parameter("weight", weight); }
  at::Tensor forward(const at::Tensor& h) { return at::matmul(h, weight.t()); }
  at::Tensor weight;
};
TORCH_MODULE(TiedHead);

// Embedding -> a unit of its own (Linear) -> tied head. With `units`, the
// embedding and the head are two wrappers of one unit, the middle a unit.
class TiedModelImpl : public torch::nn::Module {
 public:
  explicit TiedModelImpl(bool units) {
    torch::nn::Embedding embedding(kVocab, kWidth);
    TiedHead head(embedding->weight);
    if (units) {
      emb_unit = register_module("emb", Sharded<torch::nn::Embedding>(embedding));
      mid_unit = register_module("mid", Sharded<torch::nn::Linear>(torch::nn::Linear(kWidth, kWidth)));
      head_unit = register_module("head", Sharded<TiedHead>(head));
      head_unit->share_unit_with(*emb_unit);
    } else {
      emb = register_module("emb", embedding);
      mid = register_module("mid", torch::nn::Linear(kWidth, kWidth));
      head_plain = register_module("head", head);
    }
  }
  at::Tensor hidden(const at::Tensor& tokens) {
    at::Tensor e = emb_unit ? emb_unit->forward(tokens) : emb->forward(tokens);
    return at::tanh(mid_unit ? mid_unit->forward(e) : mid->forward(e));
  }
  at::Tensor logits(const at::Tensor& h) { return head_unit ? head_unit->forward(h) : head_plain->forward(h); }
  // Step kinds: the full LM loss, or a loss on the hidden states alone
  // (the head does not run).
  at::Tensor forward(const at::Tensor& tokens) { return hidden(tokens); }

  Sharded<torch::nn::Embedding> emb_unit{nullptr};
  Sharded<torch::nn::Linear> mid_unit{nullptr};
  Sharded<TiedHead> head_unit{nullptr};
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear mid{nullptr};
  TiedHead head_plain{nullptr};
};
TORCH_MODULE(TiedModel);

// Each tensor once: LibTorch's parameters() lists a tied weight under each
// of its names, and an optimizer must step it once.
std::vector<at::Tensor> unique_params(const torch::nn::Module& module) {
  std::vector<at::Tensor> unique;
  for (const auto& p : module.parameters()) {
    bool seen = false;
    for (const auto& u : unique) seen |= u.is_same(p);
    if (!seen) unique.push_back(p);
  }
  return unique;
}

// Odd steps skip the head.
template <class Model>
at::Tensor step_loss(Model& model, TiedModel& inner, int step, const at::Tensor& tokens) {
  at::Tensor h = model->forward(tokens);
  if (step % 2 == 1) return h.pow(2).mean();
  at::Tensor logits = inner->logits(h);
  return at::cross_entropy_loss(logits.reshape({-1, kVocab}), tokens.reshape({-1}));
}

class UnitOverSeveralModules : public ::testing::TestWithParam<ShardingStrategy> {};

TEST_P(UnitOverSeveralModules, TiedEmbeddingAndHeadTrainLikeOneProcess) {
  at::manual_seed(61);
  at::Tensor tokens = at::randint(0, kVocab, {kSteps, kGlobalBatch, 5});
  TiedModel reference(false);
  TiedModel initial(true);
  copy_state(*initial, *reference);
  auto ref_opt = make_optimizer(OptimizerKind::kSgdMomentum, unique_params(*reference));
  const std::vector<double> ref_losses = train_steps(*ref_opt, kSteps, [&](int s) {
    return step_loss(reference, reference, s, tokens[s]);
  });

  run_ranks(3, [&](RankContext& ctx) {
    TiedModel local(true);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(GetParam()));
    // The root holds no parameter; the tied weight is in one unit, once.
    const auto shards = param_shards(*model);
    int64_t tied_copies = 0;
    for (const auto& shard : shards) tied_copies += shard.name == "emb.weight" || shard.name == "head.weight";
    EXPECT_EQ(tied_copies, 1) << rank_str(ctx);
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, unique_params(*model));
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      opt->zero_grad();
      at::Tensor loss = step_loss(model, local, step, x);
      loss.backward();
      opt->step();
      EXPECT_LT(relative_diff(global_mean(*ctx.group, loss.item<double>()), ref_losses[step]), 1e-5)
          << rank_str(ctx) << " step " << step;
      EXPECT_EQ(memory_stats(*model).gathered_units, 0) << rank_str(ctx) << " step " << step;
    }
    expect_shards_match(*model, *reference, 1e-5, 1e-6, rank_str(ctx));
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, UnitOverSeveralModules,
                         ::testing::Values(ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                           ShardingStrategy::kNoShard),
                         [](const ::testing::TestParamInfo<ShardingStrategy>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(UnitOverSeveralModules, MisuseIsAClearErrorAtWrapTime) {
  run_ranks(1, [](RankContext& ctx) {
    // A module inside another member of the same unit.
    torch::nn::Sequential inner;
    inner->push_back(Sharded<torch::nn::Linear>(torch::nn::Linear(2, 2)));
    Sharded<torch::nn::Sequential> outer(inner);
    inner->ptr<ShardedImpl<torch::nn::LinearImpl>>(0)->share_unit_with(*outer);
    torch::nn::Sequential model;
    model->push_back(outer);
    EXPECT_THROWS_WITH(fully_shard(model, FullyShardOptions(ctx.group)),
                       "unit '0.0' shares the unit of '0', which holds it");
    // A leader outside the model.
    Sharded<torch::nn::Linear> stranger(torch::nn::Linear(2, 2));
    Sharded<torch::nn::Linear> member(torch::nn::Linear(2, 2));
    member->share_unit_with(*stranger);
    torch::nn::Sequential lonely;
    lonely->push_back(member);
    EXPECT_THROWS_WITH(fully_shard(lonely, FullyShardOptions(ctx.group)),
                       "unit '0' shares the unit of a module that is not in this model");
  });
}

}  // namespace
}  // namespace fsdp::testing
