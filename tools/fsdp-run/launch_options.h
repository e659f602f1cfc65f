#pragma once
// What the user asked fsdp-run to do, parsed and checked.
// The flags mirror torchrun (both --nproc-per-node and --nproc_per_node are
// accepted) so job scripts written for torchrun work unchanged.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp_run {

struct LaunchOptions {
  int nproc_per_node = 1;       // workers started on this node
  int nnodes = 1;               // nodes in the job
  int node_rank = 0;            // this node's index, 0 <= node_rank < nnodes
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the store
  int master_port = 29500;      // its TCP port, 1..65535
  bool standalone = false;      // single node, free port picked on localhost
  bool prefix_output = true;    // "[rank R] " before every output line
  double grace_period_s = 5.0;  // SIGTERM -> SIGKILL delay, seconds, >= 0
  std::string comm_timeout_s;   // --timeout, exported as FSDP_COMM_TIMEOUT; "" = inherit
  double stall_timeout_s = 300;  // --timeout, else FSDP_COMM_TIMEOUT, else 300
  int64_t memory_limit_bytes = 0;  // --memory-limit: each worker's RLIMIT_DATA; 0 = none
  int max_restarts = 0;  // --max-restarts: times the group is started again after a failure
  // --nnodes MIN:MAX: the job re-forms from the nodes still there; nnodes is
  // MAX and node_rank this node's id (see [Note: elastic membership] in elastic.h).
  bool elastic = false;
  int min_nodes = 1;
  double rdzv_last_call_s = 30;      // --rdzv-last-call: how long a round waits for late nodes
  double rdzv_timeout_s = 900;       // --rdzv-timeout: how long a round waits for MIN nodes
  std::vector<std::string> command;  // program, then its arguments

  int world_size() const { return nnodes * nproc_per_node; }
};

// The result of parsing: either options to run with, or an exit code to
// return at once (help printed: 0; bad input, message already printed: 2).
struct ParseResult {
  std::optional<LaunchOptions> options;
  int exit_code = 0;
};

// Parses argv. Everything after the first "--" is the worker command; without
// "--", the first argument that is not a launcher flag starts it (torchrun's
// form). Errors are printed to stderr with the value and the fix.
ParseResult parse_launch_options(int argc, char** argv);

}  // namespace fsdp_run
