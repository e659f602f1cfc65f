#include "harness/rank_processes.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <climits>
#include <cstdlib>
#include <exception>
#include <string>

#include "fsdp/comm/process_group.h"
#include "harness/multiprocess.h"

namespace fsdp::testing {
namespace {

// Set in the rank processes' environment; its value is this binary's pid.
constexpr const char* kRankProcessVariable = "FSDP_TEST_RANK_PROCESS";

std::string this_program() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  TORCH_CHECK(n > 0, "run_rank_processes: cannot read /proc/self/exe");
  return std::string(path, static_cast<size_t>(n));
}

std::string current_test_filter() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  TORCH_CHECK(info != nullptr, "run_rank_processes must be called from a test body");
  return std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
}

// In a rank's process: `body` as the rank the environment names.
void run_this_rank(const std::function<void(RankContext&)>& body, const RankRunOptions& options) {
  GroupOptions group_options;
  group_options.timeout = options.comm_timeout;
  group_options.host_staging = options.host_staging;
  try {
    ProcessGroupPtr group = init_process_group_from_env(group_options);
    RankContext ctx{group->rank(), group->size(), group, c10::intrusive_ptr<c10d::Store>()};
    body(ctx);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "this rank threw: " << e.what();
  }
}

}  // namespace

void run_rank_processes(int world_size, const std::function<void(RankContext&)>& body,
                        RankRunOptions options) {
  if (std::getenv(kRankProcessVariable) != nullptr) {
    run_this_rank(body, options);
    return;
  }
  const auto results =
      run_processes(this_program(), {current_test_filter()}, world_size, options.timeout,
                    {{kRankProcessVariable, std::to_string(::getpid())}, {"OMP_NUM_THREADS", "1"}});
  for (const ProcessResult& r : results) {
    EXPECT_EQ(r.exit_code, 0) << "rank " << r.rank << " of " << world_size << " (signal "
                              << r.term_signal << "):\n"
                              << r.output;
    // A filter that matched nothing would pass without running the body.
    EXPECT_NE(r.output.find("[  PASSED  ] 1 test."), std::string::npos)
        << "rank " << r.rank << " did not run this test:\n"
        << r.output;
  }
}

}  // namespace fsdp::testing
