// reshard_after_forward as an integer k (FSDP2's int option, ZeRO++ hpZ):
// after forward each unit keeps a 1/k chunk, and backward gathers within
// groups of k ranks instead of the whole world.

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

constexpr int kSteps = 4;
constexpr int64_t kGlobalBatch = 8;

struct Reference {
  at::Tensor inputs, targets;
  Mlp initial{nullptr};
  Mlp trained{nullptr};
  std::vector<double> losses;
};

Reference train_reference() {
  Reference r;
  at::manual_seed(31);
  r.inputs = at::randn({kSteps, kGlobalBatch, 7});
  r.targets = at::randn({kSteps, kGlobalBatch, 3});
  r.trained = Mlp(7, 10, 3, true);
  r.initial = Mlp(7, 10, 3, true);
  copy_state(*r.initial, *r.trained);
  auto opt = make_optimizer(OptimizerKind::kSgdMomentum, r.trained->parameters());
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor loss = at::mse_loss(r.trained->forward(r.inputs[step]), r.targets[step]);
    opt->zero_grad();
    loss.backward();
    opt->step();
    r.losses.push_back(loss.item<double>());
  }
  return r;
}

struct Counts {
  int64_t world_forward_ag = 0, world_backward_ag = 0, group_forward_ag = 0, group_backward_ag = 0;
};

// Trains at world size 4 with group size k; checks parity every step and
// returns the collectives of the last step.
void train_and_check(const Reference& ref, int k, const std::function<void(RankContext&, const Counts&, int64_t kept_bytes, UnitModule&)>& check) {
  run_ranks(4, [&](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    copy_state(*local, *ref.initial);
    auto model = fully_shard(local, FullyShardOptions(ctx.group)
                                        .reshard_after_forward_group_size(k));
    ProcessGroupPtr group;
    for (const auto& info : unit_infos(*model)) {
      if (info.post_forward_group) group = info.post_forward_group;
    }
    auto opt = make_optimizer(OptimizerKind::kSgdMomentum, model->parameters());
    Counts counts;
    int64_t kept = -1;
    for (int step = 0; step < kSteps; ++step) {
      const auto w0 = ctx.group->counters();
      const auto g0 = group ? group->counters() : CommCounters{};
      at::Tensor loss = at::mse_loss(model->forward(local_rows(ref.inputs[step], ctx.rank, 4)),
                                     local_rows(ref.targets[step], ctx.rank, 4));
      const auto w1 = ctx.group->counters();
      const auto g1 = group ? group->counters() : CommCounters{};
      kept = memory_stats(*model).post_forward_shard_bytes;
      opt->zero_grad();
      loss.backward();
      const auto w2 = ctx.group->counters();
      const auto g2 = group ? group->counters() : CommCounters{};
      EXPECT_EQ(memory_stats(*model).post_forward_shard_bytes, 0) << "chunks freed by backward";
      opt->step();
      counts = {w1.all_gather - w0.all_gather, w2.all_gather - w1.all_gather,
                g1.all_gather - g0.all_gather, g2.all_gather - g1.all_gather};
      const double global = global_mean(*ctx.group, loss.item<double>());
      EXPECT_LE(relative_diff(global, ref.losses[step]), 1e-5) << "rank " << ctx.rank << " step " << step;
    }
    expect_shards_match(*model, *ref.trained, 1e-5, 1e-5, "rank " + std::to_string(ctx.rank));
    check(ctx, counts, kept, *model);
  });
}

TEST(ReshardToGroup, BackwardGathersWithinTheKGroup) {
  const Reference ref = train_reference();
  train_and_check(ref, 2, [](RankContext& ctx, const Counts& c, int64_t kept, UnitModule& model) {
    // Root + 2 nested units; the root keeps its parameters, the nested ones
    // keep a half chunk each and re-gather it over 2 ranks.
    EXPECT_EQ(c.world_forward_ag, 3);
    EXPECT_EQ(c.world_backward_ag, 0);
    EXPECT_EQ(c.group_forward_ag, 0);
    EXPECT_EQ(c.group_backward_ag, 2);
    int64_t expected_kept = 0;
    ProcessGroupPtr group;
    for (const auto& info : unit_infos(model)) {
      if (info.name.empty()) {
        EXPECT_FALSE(info.post_forward_group) << "the root does not reshard";
        continue;
      }
      ASSERT_TRUE(info.post_forward_group) << info.name;
      group = info.post_forward_group;
      expected_kept += info.padded_numel / 2 * 4;  // fp32
    }
    EXPECT_EQ(kept, expected_kept) << "memory_stats counts the kept chunks";
    // Groups of 2 consecutive ranks.
    EXPECT_EQ(group->size(), 2);
    EXPECT_EQ(group->global_ranks(), (std::vector<int>{ctx.rank / 2 * 2, ctx.rank / 2 * 2 + 1}));
  });
}

TEST(ReshardToGroup, OneMeansKeepAndWorldSizeMeansPlainReshard) {
  const Reference ref = train_reference();
  train_and_check(ref, 1, [](RankContext&, const Counts& c, int64_t kept, UnitModule&) {
    EXPECT_EQ(c.world_forward_ag, 3);
    EXPECT_EQ(c.world_backward_ag, 0) << "k = 1 keeps the full parameters";
    EXPECT_EQ(kept, 0);
  });
  train_and_check(ref, 4, [](RankContext&, const Counts& c, int64_t kept, UnitModule&) {
    EXPECT_EQ(c.world_forward_ag, 3);
    EXPECT_EQ(c.world_backward_ag, 2) << "k = world size is a plain reshard";
    EXPECT_EQ(kept, 0);
  });
}

// The kept chunk is in the compute dtype and comes from the gathered buffer,
// so re-gathering it within the k-group rebuilds exactly what a full gather
// of the (cast, offloaded) shards would: with mixed precision and offload,
// k = 2 trains bitwise like a plain reshard.
TEST(ReshardToGroup, WithMixedPrecisionAndOffloadEqualsAPlainReshard) {
  const Reference ref = train_reference();
  auto train = [&](int k, std::vector<std::vector<at::Tensor>>* shards_by_rank) {
    run_ranks(4, [&](RankContext& ctx) {
      Mlp local(7, 10, 3, true);
      copy_state(*local, *ref.initial);
      auto model = fully_shard(local, FullyShardOptions(ctx.group)
                                          .mp(MixedPrecisionPolicy().param_dtype(at::kBFloat16))
                                          .offload(OffloadPolicy().offload_params(true))
                                          .reshard_after_forward_group_size(k));
      int64_t backward_gathers_in_group = 0;
      auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
      for (int step = 0; step < kSteps; ++step) {
        at::Tensor out = model->forward(local_rows(ref.inputs[step], ctx.rank, 4)).to(at::kFloat);
        at::Tensor loss = at::mse_loss(out, local_rows(ref.targets[step], ctx.rank, 4));
        opt->zero_grad();
        CommCounters before;
        for (const auto& info : unit_infos(*model)) {
          if (info.post_forward_group) before = info.post_forward_group->counters();
        }
        loss.backward();
        for (const auto& info : unit_infos(*model)) {
          if (!info.post_forward_group) continue;
          backward_gathers_in_group = info.post_forward_group->counters().all_gather - before.all_gather;
        }
        opt->step();
      }
      EXPECT_EQ(backward_gathers_in_group, k == 2 ? 2 : 0) << "rank " << ctx.rank << ", k " << k;
      std::vector<at::Tensor> shards;
      for (const auto& shard : param_shards(*model)) shards.push_back(shard.param.detach().clone());
      (*shards_by_rank)[ctx.rank] = std::move(shards);
    });
  };
  std::vector<std::vector<at::Tensor>> grouped(4), plain(4);
  train(2, &grouped);
  train(4, &plain);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_EQ(grouped[rank].size(), plain[rank].size());
    for (size_t i = 0; i < plain[rank].size(); ++i) {
      EXPECT_TRUE(grouped[rank][i].equal(plain[rank][i])) << "rank " << rank << " parameter " << i;
    }
  }
}

TEST(ReshardToGroup, ErrorsNameTheValueAndTheFix) {
  run_ranks(4, [](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)
                                              .reshard_after_forward_group_size(3)),
                       "reshard_after_forward_group_size is 3 for unit 'layers.0', which does not "
                       "divide the shard group size 4");
  });
  run_ranks(2, [](RankContext& ctx) {
    Mlp local(7, 10, 3, true);
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)
                                              .strategy(ShardingStrategy::kShardGradOp)
                                              .reshard_after_forward_group_size(2)),
                       "has no effect with strategy SHARD_GRAD_OP");
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)
                                              .reshard_after_forward(false)
                                              .reshard_after_forward_group_size(2)),
                       "set only one of them");
    EXPECT_THROWS_WITH(fully_shard(local, FullyShardOptions(ctx.group)
                                              .reshard_after_forward_group_size(-2)),
                       "reshard_after_forward_group_size is -2");
  });
}

}  // namespace
}  // namespace fsdp::testing
