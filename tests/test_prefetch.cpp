// Prefetch: the next unit's gather is issued before the current unit
// computes. It must not change results or the number of collectives, and the
// in-flight limit must bound how many units are gathered at once.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "fsdp/fsdp.h"
#include "harness/assertions.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int kSteps = 3;
constexpr int64_t kBatch = 12;  // divisible by 2 and 3

models::GPTConfig four_blocks() {
  auto config = tiny_gpt_config(true);
  config.n_layer = 4;
  return config;
}

struct StepObservation {
  std::vector<double> losses;
  int64_t forward_gathers = 0;   // all-gathers in the last step's forward
  int64_t backward_gathers = 0;  // ... and in its backward
  int peak_units = 0;            // most units gathered at once in the last step
};

StepObservation run(int ws, bool prefetch, int limit) {
  at::manual_seed(31);
  const auto config = four_blocks();
  at::Tensor tokens = at::randint(0, config.vocab_size, {kSteps, kBatch, config.context});
  models::GPT init(config);
  StepObservation result;
  run_ranks(ws, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *init);
    auto model = fully_shard(local, FullyShardOptions(ctx.group)
                                        .prefetch(prefetch)
                                        .max_inflight_all_gathers(limit));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    StepObservation mine;
    for (int step = 0; step < kSteps; ++step) {
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      reset_peak_memory_stats(*model);
      const auto before = ctx.group->counters();
      at::Tensor loss = models::lm_loss(model->forward(x), x);
      const auto after_forward = ctx.group->counters();
      opt->zero_grad();
      loss.backward();
      const auto after_backward = ctx.group->counters();
      opt->step();
      mine.forward_gathers = after_forward.all_gather - before.all_gather;
      mine.backward_gathers = after_backward.all_gather - after_forward.all_gather;
      mine.peak_units = memory_stats(*model).peak_gathered_units;
      mine.losses.push_back(global_mean(*ctx.group, loss.item<double>()));
    }
    if (ctx.rank == 0) result = mine;
  });
  return result;
}

TEST(Prefetch, OnAndOffGiveIdenticalResultsAndCollectiveCounts) {
  for (int ws : {2, 3}) {
    const auto off = run(ws, false, 2);
    const auto on = run(ws, true, 2);
    ASSERT_EQ(on.losses.size(), off.losses.size());
    for (size_t i = 0; i < on.losses.size(); ++i) EXPECT_EQ(on.losses[i], off.losses[i]) << "step " << i;
    const int64_t k = four_blocks().n_layer;
    for (const auto* obs : {&on, &off}) {
      EXPECT_EQ(obs->forward_gathers, k + 1) << "ws " << ws;
      EXPECT_EQ(obs->backward_gathers, k) << "ws " << ws;
    }
    // Without prefetch at most the root and the running block are gathered;
    // with it, the next block is gathered while the current one computes.
    EXPECT_EQ(off.peak_units, 2);
    EXPECT_EQ(on.peak_units, 3);
  }
}

TEST(Prefetch, InflightLimitBoundsGatheredUnits) {
  for (int limit : {1, 2, 3}) {
    const auto obs = run(2, true, limit);
    // The root stays gathered through forward; besides it at most `limit`
    // units are gathered or being gathered.
    EXPECT_LE(obs.peak_units, limit + 1) << "limit " << limit;
    EXPECT_EQ(obs.peak_units, limit + 1) << "the limit should also be reached, limit " << limit;
  }
}

// A model whose units run in a rank-dependent order.
class SwappingImpl : public torch::nn::Module {
 public:
  explicit SwappingImpl(int rank) : rank_(rank) {
    a = register_module("a", Sharded<torch::nn::Linear>(torch::nn::Linear(4, 4)));
    b = register_module("b", Sharded<torch::nn::Linear>(torch::nn::Linear(4, 4)));
  }
  at::Tensor forward(const at::Tensor& x) {
    return rank_ == 0 ? b->forward(a->forward(x)) : a->forward(b->forward(x));
  }
  Sharded<torch::nn::Linear> a{nullptr}, b{nullptr};

 private:
  int rank_;
};
TORCH_MODULE(Swapping);

TEST(Prefetch, RankDependentUnitOrderIsAClearError) {
  run_ranks(2, [](RankContext& ctx) {
    auto model = fully_shard(Swapping(ctx.rank), FullyShardOptions(ctx.group));
    EXPECT_THROWS_WITH(model->forward(at::randn({2, 4})), "ranks ran units in different orders");
  });
}

TEST(Prefetch, ExplicitPrefetchListsAreUsed) {
  run_ranks(2, [](RankContext& ctx) {
    const auto config = four_blocks();
    models::GPT local(config);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).max_inflight_all_gathers(4));
    // Collect the block units in order.
    std::vector<UnitModule*> blocks;
    for (const auto& m : model->modules(/*include_self=*/false)) {
      if (auto* unit = dynamic_cast<UnitModule*>(m.get())) blocks.push_back(unit);
    }
    ASSERT_EQ(blocks.size(), static_cast<size_t>(config.n_layer));
    // The first block prefetches all the others at once.
    blocks[0]->set_forward_prefetch({blocks[1], blocks[2], blocks[3]});
    at::Tensor x = at::randint(0, 256, {2, config.context});
    {
      at::NoGradGuard no_grad;
      model->forward(x);  // first step records and validates the order
      reset_peak_memory_stats(*model);
      model->forward(x);
    }
    EXPECT_EQ(memory_stats(*model).peak_gathered_units, 1 + config.n_layer);
  });
}

}  // namespace
}  // namespace fsdp::testing
