// The shell-command runner itself (harness/shell_command.h): the exit code
// and the merged output come back, and a command that runs past its limit
// ends, with everything it started.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>

#include "harness/child_process.h"
#include "harness/shell_command.h"
#include "harness/temp_dir.h"

namespace fsdp::testing {
namespace {

TEST(ShellCommand, ReturnsTheExitCodeAndBothStreamsInOrder) {
  const CommandRun r = run_command("echo one; echo two >&2; echo three; exit 7");
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.output, "one\ntwo\nthree\n");
  EXPECT_EQ(run_command("true").exit_code, 0);
  EXPECT_EQ(run_command("kill -9 $$").exit_code, -1);  // a signal is not an exit code
}

TEST(ShellCommand, PastItsLimitTheCommandAndWhatItStartedAreKilled) {
  TempDir dir("shell-command");
  const std::string pid_file = dir / "background.pid";
  // A background sleeper that records its pid, and a foreground one.
  const auto start = std::chrono::steady_clock::now();
  const CommandRun r = run_command("sleep 60 & echo $! > " + pid_file + "; echo started; sleep 60",
                                   std::chrono::seconds(1));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_TRUE(contains(r.output, "started")) << r.output;
  EXPECT_TRUE(contains(r.output, "killed after 1 s")) << r.output;
  EXPECT_LT(took, std::chrono::seconds(30));
  const pid_t background = std::stoi(read_file(pid_file));
  // Killed; reaped by init once orphaned, so allow it a moment.
  EXPECT_TRUE(wait_until([&] { return !process_alive(background); }, std::chrono::seconds(10)))
      << "pid " << background;
}

TEST(ShellCommand, WhatAFinishedCommandLeftRunningIsKilled) {
  TempDir dir("shell-command");
  const std::string pid_file = dir / "background.pid";
  // The command exits at once; its background child would run on, holding
  // nothing the caller waits for, were it not killed.
  const CommandRun r = run_command("sleep 60 >/dev/null 2>&1 & echo $! > " + pid_file);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const pid_t background = std::stoi(read_file(pid_file));
  EXPECT_TRUE(wait_until([&] { return !process_alive(background); }, std::chrono::seconds(10)))
      << "pid " << background;
}

}  // namespace
}  // namespace fsdp::testing
