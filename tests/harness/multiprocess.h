#pragma once
// Real multi-process runs, for tests of launch, faults and checkpoints.
//
// run_processes() spawns `world_size` copies of `program` with the torchrun
// variables set (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT=<a free port>), captures each one's
// stdout and stderr together, and SIGKILLs every process still running at
// `timeout`. It never throws for a failing child: callers check the results.

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace fsdp::testing {

struct ProcessResult {
  int rank;
  int exit_code;    // -1 when the process was ended by a signal
  int term_signal;  // 0 unless ended by a signal (SIGKILL after a timeout)
  std::string output;  // stdout and stderr, interleaved as written
};

std::vector<ProcessResult> run_processes(const std::string& program,
                                         const std::vector<std::string>& args, int world_size,
                                         std::chrono::milliseconds timeout,
                                         const std::map<std::string, std::string>& extra_env = {});

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0).
int free_tcp_port();
// A port P such that P .. P+count-1 on 127.0.0.1 were all free a moment ago
// (fsdp-run --nnodes takes --master-port and the port after it).
int free_tcp_ports(int count);

}  // namespace fsdp::testing
