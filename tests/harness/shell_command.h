#pragma once
// A shell command run to its end, for tests of programs most easily called
// by a command line (`python3 -c '...'`, a tool with quoted arguments):
//
//   const fsdp::testing::CommandRun r = fsdp::testing::run_command("fsdp-ckpt inspect x");
//   ASSERT_EQ(r.exit_code, 0) << r.output;
//
// [Note: shell commands in tests end]
// popen() would wait as long as the command runs: a hung peer (a Gloo
// rendezvous that never completes, a Python import stuck on a lock) would
// hang the test and then CI. Here the command runs in its own process group,
// with stdin from /dev/null, and past the limit the whole group is
// SIGKILLed: the shell and what it started. The group is also killed after
// the shell exits, so what the command left in the background in that group
// ends with it. Processes that make groups of their own escape both kills:
// fsdp-run's workers do, and end with fsdp-run through PR_SET_PDEATHSIG
// ([Note: worker process groups] in tools/fsdp-run/worker_process.h). Being in its own group,
// the command does not get a Ctrl-C meant for the test.

#include <chrono>
#include <string>

namespace fsdp::testing {

struct CommandRun {
  int exit_code = -1;  // -1: killed by a signal or at the limit
  std::string output;  // stdout and stderr together, in order
  bool finished = false;  // false: killed at the limit
};

CommandRun run_command(const std::string& command,
                       std::chrono::seconds limit = std::chrono::seconds(300));

}  // namespace fsdp::testing
