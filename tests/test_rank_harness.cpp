// The rank fixture itself (harness/rank_harness.h): a failing rank fails the
// test and names the rank, and a hung rank ends the process instead of
// hanging it.

#include <ATen/ATen.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fsdp/comm/process_group.h"
#include "harness/rank_harness.h"
#include "harness/rank_processes.h"

namespace fsdp {
namespace {

using testing::RankContext;
using testing::run_ranks;

// A failing rank fails the test and names the rank...
TEST(RankHarness, ReportsEveryFailingRank) {
  EXPECT_NONFATAL_FAILURE(run_ranks(2, [](RankContext& ctx) {
    if (ctx.rank == 1) throw std::runtime_error("boom on one");
  }), "rank 1: boom on one");
}

// ...and a hung rank ends the process instead of hanging it.
TEST(RankHarnessDeathTest, HungRankEndsTheProcess) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  testing::RankRunOptions options;
  options.timeout = std::chrono::milliseconds(500);
  EXPECT_EXIT(run_ranks(2, [](RankContext& ctx) {
    if (ctx.rank == 1) std::this_thread::sleep_for(std::chrono::hours(1));
  }, options), ::testing::ExitedWithCode(3), "rank\\(s\\) 1 still running after 500 ms");
}

// One process per rank (what CUDA backward needs): distinct processes, one
// group between them, and each rank ran this test's body.
TEST(RankProcesses, EachRankIsAProcessOfItsOwn) {
  testing::run_rank_processes(
      3,
      [](testing::RankContext& ctx) {
        const std::vector<int64_t> pids = all_gather_int64(*ctx.group, ::getpid());
        EXPECT_EQ(std::set<int64_t>(pids.begin(), pids.end()).size(), 3u);
        at::Tensor t = at::full({1}, static_cast<float>(ctx.rank));
        ctx.group->all_reduce(t, ReduceOp::kSum)->wait();
        EXPECT_EQ(t.item<float>(), 3.0f);
      },
      testing::quick());
}

}  // namespace
}  // namespace fsdp
