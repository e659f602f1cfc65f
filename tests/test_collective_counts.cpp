// Counts the collectives one training step issues (docs/design.md section 8,
// "Counts"). With a root plus k block units:
//   FULL_SHARD:     k+1 all-gathers in forward, k in backward (the root keeps
//                   its parameters from forward), k+1 reduce-scatters;
//   SHARD_GRAD_OP:  k+1 all-gathers in forward, none in backward, k+1
//                   reduce-scatters;
//   NO_SHARD:       no all-gather, no reduce-scatter, k+1 all-reduces.
// The first step adds small validation all-gathers (see [Note: execution
// order validation]), so steps after the first are measured; counters are
// read around forward and around backward only, leaving out the test's own
// loss all-reduce.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

struct Expected {
  int64_t forward_all_gathers;
  int64_t backward_all_gathers;
  int64_t reduce_scatters;
  int64_t all_reduces;
};

struct CountCase {
  int world_size;
  ShardingStrategy strategy;
  bool nested;  // blocks as units (k = n_layer), or one root unit (k = 0)
  int n_layer;
};

std::string case_name(const ::testing::TestParamInfo<CountCase>& info) {
  const auto& c = info.param;
  return "ws" + std::to_string(c.world_size) + "_" + to_string(c.strategy) +
         (c.nested ? "_nested" : "_rootonly") + "_layers" + std::to_string(c.n_layer);
}

// ctest lists each case with its parameter: print it as the case name.
void PrintTo(const CountCase& c, std::ostream* os) { *os << case_name({c, 0}); }

Expected expected_counts(const CountCase& c) {
  const int64_t k = c.nested ? c.n_layer : 0;
  switch (c.strategy) {
    case ShardingStrategy::kFullShard: return {k + 1, k, k + 1, 0};
    case ShardingStrategy::kShardGradOp: return {k + 1, 0, k + 1, 0};
    case ShardingStrategy::kNoShard: return {0, 0, 0, k + 1};
    default: break;
  }
  ADD_FAILURE() << "no expectation for " << to_string(c.strategy);
  return {};
}

class CollectiveCounts : public ::testing::TestWithParam<CountCase> {};

TEST_P(CollectiveCounts, OneTrainingStep) {
  const CountCase c = GetParam();
  const Expected expected = expected_counts(c);
  auto config = tiny_gpt_config(c.nested);
  config.n_layer = c.n_layer;
  at::manual_seed(5);
  models::GPT initial(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {4, 6, config.context});
  at::Tensor targets = at::randint(0, config.vocab_size, {4, 6, config.context});

  run_ranks(c.world_size, [&](RankContext& ctx) {
    models::GPT local(config);
    copy_state(*local, *initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group).strategy(c.strategy));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    for (int step = 0; step < 4; ++step) {
      at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
      at::Tensor y = local_rows(targets[step], ctx.rank, ctx.world_size);
      const CommCounters start = ctx.group->counters();
      at::Tensor loss = models::lm_loss(model->forward(x), y);
      const CommCounters after_forward = ctx.group->counters();
      opt->zero_grad();
      loss.backward();
      const CommCounters after_backward = ctx.group->counters();
      opt->step();
      // The test's own collective, outside the measured windows.
      global_mean(*ctx.group, loss.item<double>());
      if (step == 0) continue;  // the first step also validates the unit order

      const CommCounters fwd = after_forward - start;
      const CommCounters bwd = after_backward - after_forward;
      const std::string where = "rank " + std::to_string(ctx.rank) + " step " + std::to_string(step);
      EXPECT_EQ(fwd.all_gather, expected.forward_all_gathers) << where << ": forward all-gathers";
      EXPECT_EQ(bwd.all_gather, expected.backward_all_gathers) << where << ": backward all-gathers";
      EXPECT_EQ(fwd.reduce_scatter + bwd.reduce_scatter, expected.reduce_scatters)
          << where << ": reduce-scatters";
      EXPECT_EQ(bwd.reduce_scatter, expected.reduce_scatters)
          << where << ": reduce-scatters must all be issued in backward";
      EXPECT_EQ(fwd.all_reduce + bwd.all_reduce, expected.all_reduces) << where << ": all-reduces";
      EXPECT_EQ(fwd.broadcast + bwd.broadcast, 0) << where << ": broadcasts";
      EXPECT_EQ(fwd.barrier + bwd.barrier, 0) << where << ": barriers";
    }
  });
}

std::vector<CountCase> count_cases() {
  std::vector<CountCase> cases;
  for (int ws : {2, 3}) {
    for (auto s : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                   ShardingStrategy::kNoShard}) {
      cases.push_back({ws, s, /*nested=*/true, /*n_layer=*/2});
      cases.push_back({ws, s, /*nested=*/false, /*n_layer=*/2});
    }
    // k = 3: the counts scale with the number of units, not a constant.
    cases.push_back({ws, ShardingStrategy::kFullShard, true, 3});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Core, CollectiveCounts, ::testing::ValuesIn(count_cases()), case_name);

// The bytes FULL_SHARD's forward moves: each unit's all-gather sends this
// rank's shard to the n-1 others, so forward sends (n-1) times the sum of the
// shards, the root's included. It ties the counts above to the right buffers
// (a unit gathered twice, or a gather of the wrong size, would show here).
TEST(CollectiveCountsBytes, ForwardAllGathersSendEachShardOnce) {
  const auto config = tiny_gpt_config(true);
  at::manual_seed(5);
  models::GPT initial(config);
  at::Tensor tokens = at::randint(0, config.vocab_size, {3, 6, config.context});
  for (int ws : {2, 3}) {
    run_ranks(ws, [&](RankContext& ctx) {
      models::GPT local(config);
      copy_state(*local, *initial);
      auto model = fully_shard(local, FullyShardOptions(ctx.group));
      const int64_t shard_bytes = memory_stats(*model).sharded_param_bytes;
      for (int step = 0; step < 3; ++step) {
        at::Tensor x = local_rows(tokens[step], ctx.rank, ctx.world_size);
        const CommCounters start = ctx.group->counters();
        at::Tensor logits = model->forward(x);
        const CommCounters fwd = ctx.group->counters() - start;
        logits.sum().backward();
        if (step == 0) continue;
        EXPECT_EQ(fwd.bytes_sent, (ctx.world_size - 1) * shard_bytes)
            << "ws " << ws << " rank " << ctx.rank << " step " << step;
      }
    });
  }
}

// One rank shards nothing: after the first step a step issues no collective.
TEST(CollectiveCountsWorldSizeOne, NoCollectivesAfterTheFirstStep) {
  const auto config = tiny_gpt_config(true);
  at::manual_seed(5);
  at::Tensor tokens = at::randint(0, config.vocab_size, {3, 2, config.context});
  run_ranks(1, [&](RankContext& ctx) {
    models::GPT local(config);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    for (int step = 0; step < 3; ++step) {
      const CommCounters start = ctx.group->counters();
      at::Tensor loss = models::lm_loss(model->forward(tokens[step]), tokens[step]);
      opt->zero_grad();
      loss.backward();
      opt->step();
      const CommCounters d = ctx.group->counters() - start;
      if (step == 0) continue;
      EXPECT_EQ(d.all_gather + d.reduce_scatter + d.all_reduce + d.broadcast, 0)
          << "step " << step;
    }
  });
}

}  // namespace
}  // namespace fsdp::testing
