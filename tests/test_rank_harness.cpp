// The rank fixture itself (harness/rank_harness.h): a failing rank fails the
// test and names the rank, and a hung rank ends the process instead of
// hanging it.

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include "harness/rank_harness.h"

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

}  // namespace
}  // namespace fsdp
