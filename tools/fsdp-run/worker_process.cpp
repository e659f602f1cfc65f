// fork/exec of one worker. Everything between fork() and execve() in the
// child uses only async-signal-safe calls on memory prepared before fork().

#include "worker_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include "signal_pipe.h"

namespace fsdp_run {
namespace {

void close_pair(int fds[2]) {
  for (int i = 0; i < 2; ++i) {
    if (fds[i] >= 0) close(fds[i]);
    fds[i] = -1;
  }
}

// The child's side: never returns. Reports a failure as its errno on
// `status_fd` and exits 127.
[[noreturn]] void run_child(const SpawnRequest& request, char* const* argv, char* const* envp,
                            int out_fd, int err_fd, int status_fd, pid_t launcher_pid,
                            const sigset_t& mask) {
  auto fail = [&](int err) {
    ssize_t ignored = write(status_fd, &err, sizeof(err));
    (void)ignored;
    _exit(127);
  };
  // See [Note: worker process groups].
  if (setpgid(0, 0) != 0) fail(errno);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  // The launcher may have died between fork() and prctl(): then no death
  // signal will ever come, so go now.
  if (getppid() != launcher_pid) _exit(137);
  SignalPipe::reset_in_child(mask);

  // stdin: /dev/null. A worker in a background process group that read the
  // terminal would be stopped by SIGTTIN, and N ranks sharing stdin is
  // meaningless anyway.
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, STDIN_FILENO) < 0) fail(errno);
  if (devnull != STDIN_FILENO) close(devnull);
  if (request.capture_output) {
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) fail(errno);
  }
  // setrlimit is a plain system call, safe between fork and exec.
  if (request.data_limit_bytes > 0) {
    const rlimit limit{static_cast<rlim_t>(request.data_limit_bytes),
                       static_cast<rlim_t>(request.data_limit_bytes)};
    if (setrlimit(RLIMIT_DATA, &limit) != 0) fail(errno);
  }
  execve(request.path.c_str(), argv, envp);
  fail(errno);
  _exit(127);  // not reached
}

// NULL-terminated pointers into `strings`, for execve. Built before fork:
// allocation is not safe in the child.
std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// One spawn's pipes, all close-on-exec: the worker's stdout and stderr (only
// when captured; else -1) and the exec-status pipe.
struct SpawnPipes {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  int status[2] = {-1, -1};
};

// Returns "" or what failed; on failure no pipe is left open.
std::string open_pipes(bool capture_output, SpawnPipes& pipes) {
  if ((capture_output && (pipe2(pipes.out, O_CLOEXEC) != 0 || pipe2(pipes.err, O_CLOEXEC) != 0)) ||
      pipe2(pipes.status, O_CLOEXEC) != 0) {
    std::string error = fmt::format("pipe2() failed: {}", std::strerror(errno));
    close_pair(pipes.out);
    close_pair(pipes.err);
    return error;
  }
  return "";
}

// Waits for the exec-status pipe: EOF means execve succeeded (the pipe closed
// on exec), nullopt; an int means it failed with that errno.
std::optional<int> read_exec_errno(int status_fd) {
  int child_errno = 0;
  size_t got = 0;
  while (got < sizeof(child_errno)) {
    ssize_t n = read(status_fd, reinterpret_cast<char*>(&child_errno) + got,
                     sizeof(child_errno) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got != sizeof(child_errno)) return std::nullopt;
  return child_errno;
}

}  // namespace

SpawnedWorker spawn_worker(const SpawnRequest& request) {
  SpawnedWorker worker;
  std::vector<char*> argv = c_strings(request.argv);
  std::vector<char*> envp = c_strings(request.env);
  SpawnPipes pipes;
  worker.error = open_pipes(request.capture_output, pipes);
  if (!worker.error.empty()) return worker;

  pid_t launcher_pid = getpid();
  sigset_t previous_mask = SignalPipe::block_all();
  pid_t pid = fork();
  if (pid == 0) {
    run_child(request, argv.data(), envp.data(), pipes.out[1], pipes.err[1], pipes.status[1],
              launcher_pid, previous_mask);
  }
  int fork_errno = errno;
  if (pid > 0) {
    // Also set the group from the parent: whichever of us runs first, the
    // group exists before we ever signal it.
    setpgid(pid, pid);
  }
  SignalPipe::restore(previous_mask);

  // The parent keeps only the read ends.
  if (pipes.out[1] >= 0) close(pipes.out[1]);
  if (pipes.err[1] >= 0) close(pipes.err[1]);
  close(pipes.status[1]);
  if (pid < 0) {
    worker.error = fmt::format("fork() failed: {}", std::strerror(fork_errno));
    close(pipes.out[0]);
    close(pipes.err[0]);
    close(pipes.status[0]);
    return worker;
  }

  worker.pid = pid;
  worker.stdout_fd = pipes.out[0];
  worker.stderr_fd = pipes.err[0];
  const std::optional<int> child_errno = read_exec_errno(pipes.status[0]);
  close(pipes.status[0]);
  if (child_errno) {
    worker.exec_errno = *child_errno;
    worker.error = fmt::format("cannot execute '{}': {}", request.path, std::strerror(*child_errno));
  }
  return worker;
}

}  // namespace fsdp_run
