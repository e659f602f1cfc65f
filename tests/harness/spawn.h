#pragma once
// fork() and execve() for the harness's child processes: ChildProcess and
// run_command. Everything the child needs is built before fork(), since the
// child of a threaded process may only make async-signal-safe calls.

#include <sys/types.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

namespace fsdp::testing {

// A descriptor this process opened for a child, closed when it goes out of
// scope (once the child holds its own copy, or when starting it failed).
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

struct SpawnOptions {
  // The descriptors the child gets as its stdin, stdout and stderr; -1
  // leaves this process's own.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // The child leads a new process group, so that it and whatever it starts
  // can be signalled together (kill(-pid, ...)).
  bool own_process_group = false;
};

// This process's environment, with `overrides` ("NAME=value") replacing the
// entries of the same names, and without those `drop(name)` is true of.
std::vector<std::string> environment_with(
    const std::vector<std::string>& overrides,
    const std::function<bool(const std::string& name)>& drop = nullptr);

// A variable some launcher sets (torchrun's, OpenMPI's, Slurm's, Gloo's
// interface, OMP_NUM_THREADS): dropped from children that start jobs of
// their own, so that nothing of an outer job leaks into them.
bool is_launcher_variable(const std::string& name);

// Starts the program at the path argv[0] with `argv` and the environment
// `env`, and returns its pid. Throws std::runtime_error when fork() fails; a
// child whose execve() fails says so on its stderr and exits with 127, as a
// shell's would. Pass descriptors opened with O_CLOEXEC: the child keeps
// only its stdin, stdout and stderr.
pid_t spawn_process(std::vector<std::string> argv, std::vector<std::string> env,
                    const SpawnOptions& options);

}  // namespace fsdp::testing
