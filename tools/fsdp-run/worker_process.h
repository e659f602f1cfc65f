#pragma once
// Starting one worker: fork, its own process group, death signal, pipes for
// its output, exec of the resolved program with its rank's environment.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_run {

struct SpawnRequest {
  std::string path;                   // resolved program (see program_path.h)
  std::vector<std::string> argv;      // argv[0] is the name the user typed
  std::vector<std::string> env;       // "NAME=value" entries
  bool capture_output = true;         // false: inherit our stdout/stderr
  int64_t data_limit_bytes = 0;       // RLIMIT_DATA set in the child; 0 = unchanged
};

struct SpawnedWorker {
  pid_t pid = -1;      // also the worker's process group id
  int stdout_fd = -1;  // read ends when capture_output, else -1
  int stderr_fd = -1;
  std::string error;   // set when it could not be started (pid may be -1)
  int exec_errno = 0;  // errno of a failed execve in the child, else 0
};

// [Note: worker process groups]
// Each worker leads its own process group, so stopping a worker with
// kill(-pid, sig) also reaches processes it started (data loaders, shells).
// A terminal's Ctrl-C reaches only fsdp-run's group; fsdp-run forwards it, so
// every worker sees exactly one SIGINT. The child also asks for
// PR_SET_PDEATHSIG(SIGKILL): if fsdp-run itself is SIGKILLed and cannot clean
// up, the kernel kills the worker (its own children are covered only if they
// stay in the group and the worker's exit takes them along, so fsdp-run
// kills each group again when the job ends).
//
// Returns after the child has exec'd or failed to: a failed execve is
// reported through a close-on-exec pipe, so errors name the real errno.
SpawnedWorker spawn_worker(const SpawnRequest& request);

}  // namespace fsdp_run
