#pragma once
// Runs the local workers to the end: starts them, pumps their output, reaps
// them, and applies the stop policy.
//
// [Note: stop policy]
// - All workers exit 0: the job succeeded (exit 0).
// - A worker exits non-zero or dies from a signal (the first one, while the
//   job is still running): fsdp-run names it, sends SIGTERM to every other
//   worker's process group, SIGKILL to those still alive after the grace
//   period, and exits with that worker's code (128+N for signal N).
// - fsdp-run gets SIGINT/SIGTERM/SIGHUP: the same signal goes to every
//   worker's group, then SIGKILL after the grace period; a second signal sends
//   SIGKILL at once. fsdp-run then dies from the signal it got, as a shell
//   expects of an interrupted command.
// - A worker stopped (SIGSTOP, SIGTSTP...) for longer than the communication
//   timeout: see [Note: a stopped worker] in supervisor.cpp.
// - Whenever a worker exits, whatever is left in its process group is
//   SIGKILLed (its leftover children are orphans of a finished rank). The
//   group is killed while the worker is still an unreaped zombie, so the
//   group id cannot have been reused by an unrelated process.

#include <string>

#include "launch_options.h"

namespace fsdp_run {

// What the job ended with. Exactly one of the two is non-zero when it failed.
struct JobOutcome {
  int exit_code = 0;         // the code fsdp-run should exit with
  int launcher_signal = 0;   // a signal fsdp-run received and should die from
};

// Starts opts.nproc_per_node workers of `program_path` and supervises them.
// SignalPipe::install() must have been called.
JobOutcome supervise_workers(const LaunchOptions& opts, const std::string& program_path);

}  // namespace fsdp_run
