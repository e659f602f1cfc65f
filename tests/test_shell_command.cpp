// The shell-command runner itself (harness/shell_command.h): the exit code
// and the merged output come back, and a command that runs past its limit
// ends, with everything it started.

#include <gtest/gtest.h>
#include <unistd.h>

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
  const CommandRun r = run_command("sleep 60 & echo $! > " + pid_file + "; echo started; sleep 60",
                                   std::chrono::seconds(1));
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_TRUE(contains(r.output, "started")) << r.output;
  EXPECT_TRUE(contains(r.output, "killed after 1 s")) << r.output;
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

TEST(ShellCommand, TheCommandReadsNothingFromTheTestsStdin) {
  // The test's stdin is a pipe no one writes to or closes: a command that
  // inherited it would wait for input until its limit.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const int saved_stdin = dup(STDIN_FILENO);
  dup2(pipe_fds[0], STDIN_FILENO);
  const CommandRun r = run_command("cat; echo read-to-the-end", std::chrono::seconds(5));
  dup2(saved_stdin, STDIN_FILENO);
  for (int fd : {saved_stdin, pipe_fds[0], pipe_fds[1]}) close(fd);
  EXPECT_TRUE(r.finished) << r.output;
  EXPECT_EQ(r.output, "read-to-the-end\n");
}

}  // namespace
}  // namespace fsdp::testing
