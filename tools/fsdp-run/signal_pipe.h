#pragma once
// Signals as bytes on a pipe (the self-pipe trick), so the supervisor's one
// poll() loop sees worker output, worker exits (SIGCHLD) and the user's
// Ctrl-C in the same place, and no real work runs inside a signal handler.

#include <csignal>
#include <vector>

namespace fsdp_run {

class SignalPipe {
 public:
  // Catches SIGCHLD, SIGINT, SIGTERM and SIGHUP, and ignores SIGPIPE (a closed
  // stdout must not kill the launcher while workers still run). Call once.
  static void install();

  // The end to poll() for POLLIN.
  static int read_fd();

  // The signals caught since the last call, in arrival order.
  static std::vector<int> drain();

  // Blocks every signal in this thread; returns the previous mask. Used around
  // fork() so a child cannot run our handler before it execs.
  static sigset_t block_all();
  static void restore(const sigset_t& mask);

  // In a freshly forked child: default dispositions (SIGPIPE included, since
  // ignored signals survive exec) and the given mask restored.
  static void reset_in_child(const sigset_t& mask);
};

}  // namespace fsdp_run
