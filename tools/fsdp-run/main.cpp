// fsdp-run: a torchrun-compatible launcher in plain POSIX C++ (no LibTorch,
// so it starts instantly and runs any program, not only libfsdp ones).
//
// Where things are:
//   launch_options  flags, defaults, --help, input checks (exit 2)
//   program_path    PATH lookup before anything starts (exit 127/126)
//   free_port       --standalone's port
//   worker_env      RANK, WORLD_SIZE, ... for each worker
//   worker_process  fork/exec, process groups, death signal
//   line_prefixer   "[rank R] " whole-line output
//   signal_pipe     signals into the poll() loop
//   supervisor      the loop: output, exits, the stop policy
//   restarts        --max-restarts: the group started again, and when not
//   elastic         --nnodes MIN:MAX: rounds formed by node 0 (elastic_host)
//                   from the nodes' agents (elastic_agent), over line_channel

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "elastic.h"
#include "free_port.h"
#include "launch_options.h"
#include "program_path.h"
#include "restarts.h"
#include "signal_pipe.h"

int main(int argc, char** argv) {
  using namespace fsdp_run;
  ParseResult parsed = parse_launch_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  LaunchOptions opts = std::move(*parsed.options);

  ResolvedProgram program = resolve_program(opts.command.front());
  if (!program.error.empty()) {
    std::fprintf(stderr, "fsdp-run: %s\n", program.error.c_str());
    return program.exit_code;
  }

  if (opts.standalone) {
    std::string error;
    int port = pick_free_port(error);
    if (port == 0) {
      std::fprintf(stderr, "fsdp-run: --standalone could not find a free port: %s\n",
                   error.c_str());
      return 1;
    }
    opts.master_addr = "127.0.0.1";
    opts.master_port = port;
  }

  std::fflush(stdout);  // nothing of ours may sit in a buffer the workers race
  SignalPipe::install();
  JobOutcome outcome = opts.elastic ? run_elastic_job(opts, program.path)
                                    : supervise_with_restarts(opts, program.path);

  if (outcome.launcher_signal != 0) {
    // Die from the signal we were sent, so a calling shell or script sees an
    // interrupted command (and, for SIGINT, stops its own loop).
    std::signal(outcome.launcher_signal, SIG_DFL);
    sigset_t unblock;
    sigemptyset(&unblock);
    sigaddset(&unblock, outcome.launcher_signal);
    sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
    raise(outcome.launcher_signal);
    return 128 + outcome.launcher_signal;
  }
  return outcome.exit_code;
}
