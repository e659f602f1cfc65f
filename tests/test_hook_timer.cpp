// fsdp::HookTimer: the wall time inside the hooks, by hook. Every hook a step
// runs must be counted once, on every rank's thread; nothing must be counted
// outside a timer's life; and a user's own "FSDP::" range around the hooks
// must be what counts, not the hooks inside it twice.

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <optional>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int64_t kBatch = 4;

std::map<std::string, HookTime> by_range(const std::vector<HookTime>& times) {
  std::map<std::string, HookTime> out;
  for (const HookTime& t : times) {
    EXPECT_EQ(out.count(t.range), 0u) << t.range << " listed twice";
    out[t.range] = t;
  }
  return out;
}

// One training step of a tiny GPT (two sharded blocks and the root: three
// units) on `world_size` ranks; `before_step` runs on each rank's thread
// after the model is sharded, just before the step.
void train_one_step(int world_size, const std::function<void(RankContext&)>& before_step) {
  at::manual_seed(5);
  const auto config = tiny_gpt_config(true);
  at::Tensor tokens = at::randint(0, config.vocab_size, {kBatch, config.context});
  run_ranks(world_size, [&](RankContext& ctx) {
    models::GPT local(config);
    auto model = fully_shard(local, FullyShardOptions(ctx.group));
    auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
    const at::Tensor x = local_rows(tokens, ctx.rank, ctx.world_size);
    before_step(ctx);
    lm_train_step(model, *opt, x);
  });
}

constexpr int64_t kBlocks = 2;  // tiny_gpt_config(true)
constexpr int64_t kUnits = kBlocks + 1;  // the blocks and the root

TEST(HookTimer, CountsEveryHookOfAStepOnEveryRank) {
  for (int ws : {1, 2}) {
    HookTimer timer;
    train_one_step(ws, [](RankContext&) {});
    const auto times = by_range(timer.take());
    ASSERT_EQ(times.count("FSDP::pre_forward"), 1u) << "ws " << ws;
    EXPECT_EQ(times.at("FSDP::pre_forward").calls, ws * kUnits) << "ws " << ws;
    EXPECT_EQ(times.at("FSDP::post_forward").calls, ws * kUnits) << "ws " << ws;
    EXPECT_EQ(times.at("FSDP::root_post_backward_callback").calls, ws) << "ws " << ws;
    // Each unit has one output that needs a gradient: one pre-backward hook.
    EXPECT_EQ(times.at("FSDP::pre_backward").calls, ws * kUnits) << "ws " << ws;
    // A post-backward node sits on the inputs of a unit with a reduction to
    // do: none on one rank, and the root's inputs (tokens) need no gradient,
    // so the end-of-backward callback closes it.
    if (ws == 1) {
      EXPECT_EQ(times.count("FSDP::post_backward"), 0u);
    } else {
      ASSERT_EQ(times.count("FSDP::post_backward"), 1u) << "ws " << ws;
      EXPECT_EQ(times.at("FSDP::post_backward").calls, ws * kBlocks) << "ws " << ws;
    }
    for (const auto& [range, t] : times) EXPECT_GT(t.seconds, 0.0) << range;
    EXPECT_EQ(times.size(), ws == 1 ? 4u : 5u) << "ws " << ws;
    EXPECT_TRUE(timer.take().empty()) << "take() must restart the totals";
    EXPECT_EQ(hook_name(times.at("FSDP::pre_forward")), "pre_forward");
  }
}

TEST(HookTimer, SecondLiveTimerIsRefusedWithTheFix) {
  HookTimer first;
  try {
    HookTimer second;
    FAIL() << "a second live HookTimer was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(error_message(e).find("another HookTimer is already counting"), std::string::npos)
        << error_message(e);
  }
  EXPECT_TRUE(first.take().empty());  // the refused timer disturbed nothing
}

TEST(HookTimer, OnlyTheOutermostFsdpRangeCounts) {
  HookTimer timer;
  train_one_step(1, [](RankContext&) {});
  const auto plain = by_range(timer.take());
  {
    // The same step inside a user's own "FSDP::" range: the hooks run inside
    // it, so only it is counted, and its time covers theirs.
    at::manual_seed(5);
    const auto config = tiny_gpt_config(true);
    at::Tensor tokens = at::randint(0, config.vocab_size, {kBatch, config.context});
    run_ranks(1, [&](RankContext& ctx) {
      models::GPT local(config);
      auto model = fully_shard(local, FullyShardOptions(ctx.group));
      auto opt = make_optimizer(OptimizerKind::kAdamW, model->parameters());
      at::Tensor loss = models::lm_loss(model->forward(tokens), tokens);
      {
        RECORD_USER_SCOPE("FSDP::outer");
        opt->zero_grad();
        loss.backward();  // backward's hooks run on this thread on the CPU
      }
      opt->step();
    });
  }
  const auto nested = by_range(timer.take());
  ASSERT_EQ(nested.count("FSDP::outer"), 1u);
  EXPECT_EQ(nested.at("FSDP::outer").calls, 1);
  EXPECT_EQ(nested.count("FSDP::pre_backward"), 0u) << "a hook inside FSDP::outer was counted";
  EXPECT_EQ(nested.count("FSDP::post_backward"), 0u);
  EXPECT_EQ(nested.count("FSDP::root_post_backward_callback"), 0u);
  // Forward ran outside the user's range, so its hooks count as before.
  EXPECT_EQ(nested.at("FSDP::pre_forward").calls, plain.at("FSDP::pre_forward").calls);
}

TEST(HookTimer, CountsNothingOutsideItsLife) {
  std::optional<HookTimer> timer;
  train_one_step(1, [&](RankContext&) { timer.emplace(); });
  EXPECT_FALSE(timer->take().empty());
  timer.reset();
  train_one_step(1, [](RankContext&) {});  // with no timer alive
  HookTimer later;
  EXPECT_TRUE(later.take().empty()) << "hooks run with no timer alive were counted";
  train_one_step(1, [](RankContext&) {});
  EXPECT_EQ(by_range(later.take()).at("FSDP::pre_forward").calls, kUnits);
}

}  // namespace
}  // namespace fsdp::testing
