// fully_shard with compressed communication (FullyShardOptions::compression):
// with every strategy, a hybrid mesh's inter-node hop alone and the k-group
// reshard, the gradients stay within the wire format's precision of the
// uncompressed run's, the collectives that carry them are the compressed ones,
// and they send the bytes the format promises. Off, nothing changes, bitwise.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "fsdp/fsdp.h"
#include "harness/models.h"
#include "harness/parity.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

constexpr int64_t kIn = 32, kHidden = 300, kOut = 16, kGlobalBatch = 8;

Compression int8() { return Compression().format(WireFormat::kInt8); }
Compression bf16() { return Compression().format(WireFormat::kBf16); }

struct StepResult {
  std::vector<at::Tensor> grads;  // this rank's (sharded) gradients, after one backward
  CommCounters sent;              // every group the step used, added up
};

CommCounters sum(const std::vector<ProcessGroupPtr>& groups) {
  CommCounters total;
  for (const auto& g : groups) {
    const CommCounters c = g->counters();
    total.all_gather += c.all_gather;
    total.reduce_scatter += c.reduce_scatter;
    total.all_reduce += c.all_reduce;
    total.all_to_all += c.all_to_all;
    total.bytes_sent += c.bytes_sent;
  }
  return total;
}

// |compressed - exact| / |exact| over every rank's gradients together.
double relative_error(ProcessGroup& group, const StepResult& compressed, const StepResult& exact) {
  at::Tensor sums = at::zeros({2}, at::kDouble);
  for (size_t i = 0; i < exact.grads.size(); ++i) {
    sums[0] += (compressed.grads[i] - exact.grads[i]).to(at::kDouble).pow(2).sum();
    sums[1] += exact.grads[i].to(at::kDouble).pow(2).sum();
  }
  group.all_reduce(sums, ReduceOp::kSum)->wait();
  return std::sqrt(sums[0].item<double>() / sums[1].item<double>());
}

// Every run builds the same model and batch from one seed; ranks are
// threads sharing the global generator, so they take turns.
std::mutex& build_turns() {
  static std::mutex mu;
  return mu;
}

// One forward and backward on this rank's rows of the batch, sharded with
// `options` (whose groups are listed in `groups`).
StepResult run(const RankContext& ctx, const FullyShardOptions& options,
               const std::vector<ProcessGroupPtr>& groups) {
  std::unique_lock<std::mutex> turn(build_turns());
  at::manual_seed(5);
  Mlp local(kIn, kHidden, kOut, /*units=*/true);
  at::Tensor x = at::randn({kGlobalBatch, kIn}), y = at::randn({kGlobalBatch, kOut});
  turn.unlock();
  auto model = fully_shard(local, options);
  const CommCounters before = sum(groups);
  at::mse_loss(model->forward(local_rows(x, ctx.rank, ctx.world_size)),
               local_rows(y, ctx.rank, ctx.world_size))
      .backward();
  StepResult result;
  result.sent = sum(groups) - before;
  for (const auto& p : model->parameters()) result.grads.push_back(p.grad().clone());
  return result;
}

struct StrategyCase {
  ShardingStrategy strategy;
  Compression format;
  double tolerance;  // relative gradient error the format allows here
};

std::string case_name(const StrategyCase& c) {
  return std::string(to_string(c.strategy)) + "_" + to_string(c.format.format());
}
void PrintTo(const StrategyCase& c, std::ostream* os) { *os << case_name(c); }

class CompressedStrategies : public ::testing::TestWithParam<StrategyCase> {};

TEST_P(CompressedStrategies, GradientsStayWithinTheFormatsPrecision) {
  const StrategyCase c = GetParam();
  run_ranks(2, [&](RankContext& ctx) {
    const FullyShardOptions plain = FullyShardOptions(ctx.group).strategy(c.strategy);
    FullyShardOptions compressed = plain;
    compressed.compression(CommCompression().weights(c.format).grads(c.format).replicate_grads(c.format));
    const StepResult exact = run(ctx, plain, {ctx.group});
    const StepResult approx = run(ctx, compressed, {ctx.group});
    const double error = relative_error(*ctx.group, approx, exact);
    EXPECT_LE(error, c.tolerance) << rank_str(ctx);
    EXPECT_GT(error, 0) << "compression changed nothing: was it applied?";
    // The reductions are all-to-alls now; the gathers carry encoded bytes.
    EXPECT_EQ(approx.sent.reduce_scatter, 0);
    EXPECT_GT(approx.sent.all_to_all, 0);
    const double ratio = static_cast<double>(approx.sent.bytes_sent) / exact.sent.bytes_sent;
    const double expected = c.format.format() == WireFormat::kInt8 ? 0.254 : 0.5;
    // Small units pay for alignment and a scale per chunk; all-reduce's
    // second half and the exact flags add a little.
    EXPECT_GE(ratio, expected * 0.95) << rank_str(ctx);
    EXPECT_LE(ratio, expected * 1.25) << rank_str(ctx);
  });
}

INSTANTIATE_TEST_SUITE_P(
    WorldOf2, CompressedStrategies,
    ::testing::Values(StrategyCase{ShardingStrategy::kFullShard, int8(), 2e-2},
                      StrategyCase{ShardingStrategy::kShardGradOp, int8(), 2e-2},
                      // An all-reduce quantizes twice: each contribution, then the sum.
                      StrategyCase{ShardingStrategy::kNoShard, int8(), 3e-2},
                      StrategyCase{ShardingStrategy::kFullShard, bf16(), 1e-2}),
    [](const auto& info) { return case_name(info.param); });

TEST(CompressedHybrid, OnlyTheInterNodeHopIsCompressed) {
  run_ranks(4, [](RankContext& ctx) {
    const DeviceMesh mesh = make_hybrid_mesh(ctx.group, 2);
    const FullyShardOptions plain = FullyShardOptions(mesh).strategy(ShardingStrategy::kHybridShard);
    FullyShardOptions compressed = plain;
    compressed.compression(CommCompression().replicate_grads(int8()));
    const CommCounters shard0 = mesh.shard->counters();
    const StepResult exact = run(ctx, plain, {mesh.shard, mesh.replicate});
    const CommCounters shard1 = mesh.shard->counters();
    const StepResult approx = run(ctx, compressed, {mesh.shard, mesh.replicate});
    const CommCounters shard2 = mesh.shard->counters();
    EXPECT_LE(relative_error(*ctx.group, approx, exact), 3e-2) << rank_str(ctx);  // all-reduce: twice
    // Within the node, the same collectives and bytes as uncompressed.
    EXPECT_EQ((shard2 - shard1).bytes_sent, (shard1 - shard0).bytes_sent);
    EXPECT_EQ((shard2 - shard1).all_to_all, 0);
    // Across replicas, the all-reduces became compressed exchanges.
    EXPECT_GT(approx.sent.all_to_all, 0);
    EXPECT_LT(approx.sent.bytes_sent, exact.sent.bytes_sent);
  });
}

TEST(CompressedReshardToGroup, BackwardRegathersWithinTheGroupCompressed) {
  run_ranks(4, [](RankContext& ctx) {
    const FullyShardOptions plain = FullyShardOptions(ctx.group).reshard_after_forward_group_size(2);
    FullyShardOptions compressed = plain;
    compressed.compression(CommCompression().weights(int8()));
    const StepResult exact = run(ctx, plain, {ctx.group});
    const StepResult approx = run(ctx, compressed, {ctx.group});
    EXPECT_LE(relative_error(*ctx.group, approx, exact), 2e-2) << rank_str(ctx);
    EXPECT_EQ(approx.sent.all_gather, exact.sent.all_gather);
    EXPECT_LT(approx.sent.bytes_sent, exact.sent.bytes_sent);
  });
}

TEST(CompressionOff, IsBitwiseTheDefault) {
  run_ranks(2, [](RankContext& ctx) {
    const FullyShardOptions plain(ctx.group);
    FullyShardOptions as_is = plain;
    as_is.compression(CommCompression().weights(Compression()).grads(Compression()));
    const StepResult a = run(ctx, plain, {ctx.group});
    const StepResult b = run(ctx, as_is, {ctx.group});
    for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(a.grads[i].equal(b.grads[i])) << i;
    EXPECT_EQ(b.sent.all_to_all, 0);
    EXPECT_EQ(b.sent.bytes_sent, a.sent.bytes_sent);
  });
}

TEST(CompressionOptions, ABadBlockSizeIsRefusedAtWrapTime) {
  run_ranks(1, [](RankContext& ctx) {
    FullyShardOptions options(ctx.group);
    options.compression(CommCompression().grads(int8().block_size(0)));
    try {
      fully_shard(Mlp(kIn, kHidden, kOut, true), options);
      ADD_FAILURE() << "block size 0 was accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("compression grads block_size is 0"), std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace fsdp::testing
