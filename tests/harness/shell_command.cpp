#include "harness/shell_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "harness/child_process.h"
#include "harness/spawn.h"
#include "harness/temp_dir.h"

namespace fsdp::testing {
namespace {

// Starts /bin/sh -c `command` as the leader of a new process group, its
// stdout and stderr both writing `output_path`.
pid_t start_shell(const std::string& command, const std::string& output_path) {
  const ScopedFd out(open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (out.get() < 0) throw std::runtime_error("run_command: cannot create " + output_path);
  // Not the terminal's stdin: a background process group that reads it is
  // stopped (SIGTTIN), which waiting for an exit would not see.
  const ScopedFd in(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) throw std::runtime_error("run_command: cannot open /dev/null");
  SpawnOptions options;
  options.stdin_fd = in.get();
  options.stdout_fd = options.stderr_fd = out.get();
  options.own_process_group = true;
  return spawn_process({"/bin/sh", "-c", command}, environment_with({}), options);
}

[[noreturn]] void fail(const std::string& call) {
  throw std::runtime_error("run_command: " + call + ": " + std::strerror(errno));
}

// True once the shell has exited, without reaping it: until it is reaped
// its pid, and so the group's id, cannot be reused, so killing the group
// cannot hit a stranger.
bool exited(pid_t pid) {
  while (true) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
      return info.si_pid == pid;
    }
    if (errno != EINTR) fail("waitid");
  }
}

int reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail("waitpid");
  }
  return status;
}

}  // namespace

CommandRun run_command(const std::string& command, std::chrono::seconds limit) {
  const TempDir dir("fsdp-command");
  const std::string output_path = dir / "output";
  const pid_t pid = start_shell(command, output_path);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool done = exited(pid);
  while (!done && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    done = exited(pid);
  }
  kill(-pid, SIGKILL);  // at the limit: all of it; else what it left behind
  const int status = reap(pid);
  CommandRun run;
  // Had it exited just before the kill, its status says so.
  run.finished = done || !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  run.exit_code = run.finished && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.output = read_file(output_path);
  if (!run.finished) {
    run.output += "\n[run_command: killed after " + std::to_string(limit.count()) + " s: " +
                  command + "]\n";
  }
  return run;
}

}  // namespace fsdp::testing
