// The README's examples compile (they are built with the project) and work:
// examples/train_mlp runs as real processes under the torchrun variables,
// and on 2 ranks it prints the losses one process prints.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "harness/child_process.h"
#include "harness/multiprocess.h"
#include "harness/shell_command.h"

namespace fsdp::testing {
namespace {

const std::string kTrainMlp = std::string(FSDP_BIN_DIR) + "/train_mlp";
constexpr int kSteps = 15;

std::string all_output(const std::vector<ProcessResult>& results) {
  std::ostringstream out;
  for (const auto& r : results) {
    out << "--- rank " << r.rank << " (exit " << r.exit_code << ", signal " << r.term_signal
        << ")\n"
        << r.output << "\n";
  }
  return out.str();
}

// "step N loss X" lines of rank 0, in order.
std::vector<double> losses_of(const std::vector<ProcessResult>& results) {
  std::vector<double> losses;
  for (const auto& r : results) {
    if (r.rank != 0) continue;
    static const std::regex line(R"(step (\d+) loss ([0-9.eE+-]+))");
    for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line);
         it != std::sregex_iterator(); ++it) {
      EXPECT_EQ(std::stoi((*it)[1]), static_cast<int>(losses.size()));
      losses.push_back(std::stod((*it)[2]));
    }
  }
  return losses;
}

std::vector<ProcessResult> run_example(int world_size) {
  return run_processes(kTrainMlp, {"--steps", std::to_string(kSteps)}, world_size,
                       std::chrono::seconds(120), {{"OMP_NUM_THREADS", "1"}});
}

TEST(Examples, TrainMlpOnTwoRanksMatchesOneProcess) {
  const auto single = run_example(1);
  const auto sharded = run_example(2);
  ASSERT_EQ(single.size(), 1u);
  ASSERT_EQ(sharded.size(), 2u);
  for (const auto& r : single) ASSERT_EQ(r.exit_code, 0) << all_output(single);
  for (const auto& r : sharded) ASSERT_EQ(r.exit_code, 0) << all_output(sharded);

  const auto expected = losses_of(single);
  const auto actual = losses_of(sharded);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps)) << all_output(single);
  ASSERT_EQ(actual.size(), static_cast<size_t>(kSteps)) << all_output(sharded);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_NEAR(actual[step], expected[step], 1e-5 * std::abs(expected[step]) + 1e-7)
        << "step " << step << "\n"
        << all_output(sharded);
  }
  EXPECT_LT(actual.back(), 0.5 * actual.front()) << "the example does not learn\n"
                                                 << all_output(sharded);
  // Rank 0 holds about half of the parameters.
  const std::regex held(R"(rank 0 holds (\d+) of (\d+) parameter bytes)");
  std::smatch m;
  const std::string& out0 = sharded[0].rank == 0 ? sharded[0].output : sharded[1].output;
  ASSERT_TRUE(std::regex_search(out0, m, held)) << out0;
  const double fraction = std::stod(m[1]) / std::stod(m[2]);
  EXPECT_NEAR(fraction, 0.5, 0.01) << out0;
}

TEST(Examples, TrainMlpWithoutALauncherSaysWhatIsMissing) {
  // Run directly, without RANK/WORLD_SIZE/MASTER_*: a clear error, exit 1.
  const CommandRun run = run_command(kTrainMlp + " --steps 1", std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(contains(run.output, "train_mlp: fsdp: no launcher environment found"))
      << run.output;
}

}  // namespace
}  // namespace fsdp::testing
