// fork/exec of one worker. Everything between fork() and execve() in the
// child uses only async-signal-safe calls on memory prepared before fork().

#include "worker_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstring>

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
  execve(request.path.c_str(), argv, envp);
  fail(errno);
  _exit(127);  // not reached
}

}  // namespace

SpawnedWorker spawn_worker(const SpawnRequest& request) {
  SpawnedWorker worker;
  // Build argv/envp before fork: allocation is not safe in the child.
  std::vector<char*> argv;
  for (const auto& arg : request.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& entry : request.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);

  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int status_pipe[2] = {-1, -1};
  if (request.capture_output &&
      (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
    worker.error = fmt::format("pipe2() failed: {}", std::strerror(errno));
    close_pair(out_pipe);
    close_pair(err_pipe);
    return worker;
  }
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    worker.error = fmt::format("pipe2() failed: {}", std::strerror(errno));
    close_pair(out_pipe);
    close_pair(err_pipe);
    return worker;
  }

  pid_t launcher_pid = getpid();
  sigset_t previous_mask = SignalPipe::block_all();
  pid_t pid = fork();
  if (pid == 0) {
    run_child(request, argv.data(), envp.data(), out_pipe[1], err_pipe[1], status_pipe[1],
              launcher_pid, previous_mask);
  }
  int fork_errno = errno;
  if (pid > 0) {
    // Also set the group from the parent: whichever of us runs first, the
    // group exists before we ever signal it.
    setpgid(pid, pid);
  }
  SignalPipe::restore(previous_mask);

  if (out_pipe[1] >= 0) close(out_pipe[1]);
  if (err_pipe[1] >= 0) close(err_pipe[1]);
  close(status_pipe[1]);
  if (pid < 0) {
    worker.error = fmt::format("fork() failed: {}", std::strerror(fork_errno));
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(status_pipe[0]);
    return worker;
  }

  worker.pid = pid;
  worker.stdout_fd = out_pipe[0];
  worker.stderr_fd = err_pipe[0];

  // EOF here means execve succeeded (the pipe closed on exec); an int means
  // it failed with that errno.
  int child_errno = 0;
  size_t got = 0;
  while (got < sizeof(child_errno)) {
    ssize_t n = read(status_pipe[0], reinterpret_cast<char*>(&child_errno) + got,
                     sizeof(child_errno) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(status_pipe[0]);
  if (got == sizeof(child_errno)) {
    worker.exec_errno = child_errno;
    worker.error = fmt::format("cannot execute '{}': {}", request.path, std::strerror(child_errno));
  }
  return worker;
}

}  // namespace fsdp_run
