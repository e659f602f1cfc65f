#include "harness/shell_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

#include "harness/child_process.h"
#include "harness/temp_dir.h"

extern char** environ;

namespace fsdp::testing {
namespace {

// Forks /bin/sh -c `command` as the leader of a new process group, its
// stdout and stderr both writing `output_path`.
pid_t start_shell(const std::string& command, const std::string& output_path) {
  const int out_fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0) throw std::runtime_error("run_command: cannot create " + output_path);
  // Built before fork(): the child of a threaded process only makes
  // async-signal-safe calls.
  std::string sh = "/bin/sh", dash_c = "-c", text = command;
  char* const argv[] = {sh.data(), dash_c.data(), text.data(), nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    execve(argv[0], argv, environ);
    _exit(127);
  }
  close(out_fd);
  if (pid < 0) throw std::runtime_error("run_command: fork failed for " + command);
  setpgid(pid, pid);  // also here: the child may not have run yet
  return pid;
}

}  // namespace

CommandRun run_command(const std::string& command, std::chrono::seconds limit) {
  const TempDir dir("fsdp-command");
  const std::string output_path = dir / "output";
  const pid_t pid = start_shell(command, output_path);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  CommandRun run;
  // Waits without reaping: until the shell is reaped its pid, and so the
  // group's id, cannot be reused, so killing the group cannot hit a stranger.
  while (std::chrono::steady_clock::now() < deadline) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      run.finished = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(-pid, SIGKILL);  // at the limit: all of it; else what it left behind
  int status = 0;
  waitpid(pid, &status, 0);
  run.exit_code = run.finished && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.output = read_file(output_path);
  if (!run.finished) {
    run.output += "\n[run_command: killed after " + std::to_string(limit.count()) + " s: " +
                  command + "]\n";
  }
  return run;
}

}  // namespace fsdp::testing
