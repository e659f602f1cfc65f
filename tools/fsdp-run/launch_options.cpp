// Command-line parsing for fsdp-run. CLI11 reads the flags as strings and we
// convert them here, so every bad value gets a message that names the flag,
// the value and the fix (CLI11's own conversion errors do not say the fix).

#include "launch_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "cli_help_format.h"

namespace fsdp_run {
namespace {

constexpr int kBadInput = 2;
constexpr long kMostRestarts = 1000000;

constexpr const char* kDescription =
    "fsdp-run: start N worker processes of one program on this node with the\n"
    "torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
    "GROUP_RANK, NODE_RANK, MASTER_ADDR, MASTER_PORT), prefix their output\n"
    "with the rank, and stop them all when one fails.";

constexpr const char* kFooter = R"(OUTPUT
  Each worker line goes to fsdp-run's stdout or stderr (the same stream the
  worker used) as "[rank R] <line>", written whole so ranks never interleave
  within a line. '\r' also ends a line, so progress bars stay readable. A last
  line without a newline gets one at exit. --no-prefix hands the workers
  fsdp-run's own stdout and stderr instead (bytes untouched, no prefixes).

EXIT STATUS
  0 when every worker exits 0. When a worker exits non-zero or dies from a
  signal, the others get SIGTERM, then SIGKILL after --grace-period, and
  fsdp-run exits with that worker's code (128+N for signal N). A worker
  stopped by a signal for longer than --timeout is killed and counts as
  killed by SIGKILL: 137. SIGINT, SIGTERM and SIGHUP sent to fsdp-run are
  forwarded to every worker; a second one sends SIGKILL at once. 2: bad flags. 126/127: the program cannot be run or
  is not found.

RESTARTS
  With --max-restarts K, a failed group (a worker that exits non-zero, is
  killed, or stays stopped past --timeout) is stopped as above and then
  started again, up to K times; the exit status is the last failure's when
  they run out. Each restart is logged on stderr with its cause (the rank,
  its exit code or signal) and how long stopping the group took. Never
  restarted: SIGINT, SIGTERM or SIGHUP sent to fsdp-run itself (Ctrl-C stops
  the job), and a program that cannot be started (126/127).
  Same step: when two failures in a row happen at the same training step,
  restarting again would not get past it, so fsdp-run stops and names the
  step. A worker reports its progress by writing its last completed step to
  the file FSDP_RUN_PROGRESS_FILE names (fsdp-train does); a program that
  writes none is restarted until K runs out.
  Every worker gets TORCHELASTIC_RESTART_COUNT (0 for the first start) and
  TORCHELASTIC_MAX_RESTARTS, as under torchrun, and after a restart
  FSDP_RUN_FAILURE_TIME: the failure's time, in seconds since the epoch, to
  measure the restart's latency. The program resumes by itself, e.g.
    fsdp-run --standalone --nproc-per-node 2 --max-restarts 3 -- \
      fsdp-train --resume auto --run-dir runs/long --save-every 50

ELASTIC JOBS
  With --nnodes MIN:MAX every node runs the same command, with its own
  --node-rank id; node 0 hosts the rendezvous at --master-addr:--master-port,
  and the workers' store is at --master-port + 1. Node 0 starts a round of
  the job at once when MAX nodes have joined, or --rdzv-last-call seconds
  after MIN have. When a worker fails or a node is lost (its fsdp-run dies or
  its machine goes away), every node stops its workers and node 0 applies
  --max-restarts to the whole job: the next round forms from the nodes still
  there (a node that comes back joins at the next restart), RANK and
  WORLD_SIZE renumbered. Losing node 0 ends the job: the other nodes stop
  their workers and exit 1, naming it. With fewer than MIN nodes after
  --rdzv-timeout, the job fails. fsdp-train --resume auto resumes at the new
  world size with the same global batch:
    node0$ fsdp-run --nnodes 1:2 --node-rank 0 --nproc-per-node 2 \
             --master-addr node0.example --max-restarts 3 -- \
             fsdp-train --resume auto --run-dir /shared/run --save-every 50
    node1$ (the same, with --node-rank 1)

EXAMPLES
  Single node, 4 workers, free port picked on localhost:
    fsdp-run --standalone --nproc-per-node 4 -- ./train --steps 100

  Two nodes, 2 workers each (run one command on each node):
    node0$ fsdp-run --nnodes 2 --node-rank 0 --nproc-per-node 2 \
             --master-addr node0.example --master-port 29500 -- ./train
    node1$ fsdp-run --nnodes 2 --node-rank 1 --nproc-per-node 2 \
             --master-addr node0.example --master-port 29500 -- ./train

  mpirun / srun need no fsdp-run: libfsdp also reads OMPI_COMM_WORLD_* and
  SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. Export MASTER_ADDR and MASTER_PORT:
    MASTER_ADDR=node0 MASTER_PORT=29500 mpirun -np 8 -x MASTER_ADDR -x MASTER_PORT ./train
    MASTER_ADDR=node0 MASTER_PORT=29500 srun -N 2 --ntasks-per-node 4 ./train
)";

// CLI11's usage line does not know about the "-- PROGRAM" part.
class LauncherFormatter : public fsdp::tools::HelpFormatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "\nUsage: fsdp-run [OPTIONS] -- PROGRAM [ARGS...]\n";
  }
};

void print_error(const std::string& message) {
  std::fprintf(stderr, "fsdp-run: %s\n", message.c_str());
}

// Parses a whole decimal integer; nullopt for "", "2x", "auto", overflow.
std::optional<long> to_long(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

std::optional<double> to_seconds(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !(value >= 0) || value > 86400.0) return std::nullopt;
  return value;
}

// "3G", "512M", "1.5G", "1048576": bytes, with K, M, G or T as powers of
// 1024; nullopt for anything else, zero, or more than 2^62.
std::optional<int64_t> to_bytes(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  const std::string suffix(end);
  const std::string units = "KMGT";
  double scale = 1;
  if (suffix.size() == 1 && units.find(suffix[0]) != std::string::npos) {
    for (size_t i = 0; i <= units.find(suffix[0]); ++i) scale *= 1024;
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  value *= scale;
  if (errno != 0 || !(value >= 1) || value > 4.6e18) return std::nullopt;
  return static_cast<int64_t>(value);
}

// The flags as the user typed them, before conversion.
struct RawFlags {
  std::string nproc_per_node = "1";
  std::string nnodes = "1";
  std::string node_rank = "0";
  std::string master_addr = "127.0.0.1";
  std::string master_port = "29500";
  std::string grace_period = "5";
  std::string timeout;  // "" = FSDP_COMM_TIMEOUT as inherited, or the library's 300 s
  std::string memory_limit;  // "" = none
  std::string max_restarts = "0";
  std::string rdzv_last_call;  // "" = 30 s
  std::string rdzv_timeout;    // "" = 900 s
  bool standalone = false;
  bool no_prefix = false;
};

// Workers and nodes: how many, and which node this is.
std::string convert_layout(const RawFlags& raw, LaunchOptions& opts) {
  auto nproc = to_long(raw.nproc_per_node);
  if (!nproc || *nproc < 1 || *nproc > 4096) {
    return fmt::format(
        "--nproc-per-node must be a whole number of workers from 1 to 4096, got '{}' "
        "(e.g. --nproc-per-node 2)",
        raw.nproc_per_node);
  }
  const size_t colon = raw.nnodes.find(':');
  opts.elastic = colon != std::string::npos;
  auto min_nodes = to_long(opts.elastic ? raw.nnodes.substr(0, colon) : raw.nnodes);
  auto nnodes = to_long(opts.elastic ? raw.nnodes.substr(colon + 1) : raw.nnodes);
  if (!min_nodes || !nnodes || *min_nodes < 1 || *nnodes < *min_nodes || *nnodes > 65536) {
    return fmt::format(
        "--nnodes must be a whole number of nodes >= 1, or an elastic range "
        "MIN:MAX with 1 <= MIN <= MAX, got '{}' (e.g. --nnodes 2 or --nnodes 1:2)",
        raw.nnodes);
  }
  auto node_rank = to_long(raw.node_rank);
  if (!node_rank || *node_rank < 0 || *node_rank >= *nnodes) {
    return fmt::format(
        "--node-rank must be in [0, {}) because --nnodes is {}, got '{}' (number the nodes "
        "0..{})",
        *nnodes, raw.nnodes, raw.node_rank, *nnodes - 1);
  }
  if (*nproc * *nnodes > INT_MAX / 2) {
    return fmt::format("--nnodes {} x --nproc-per-node {} is too many ranks", *nnodes, *nproc);
  }
  opts.nproc_per_node = static_cast<int>(*nproc);
  opts.min_nodes = static_cast<int>(*min_nodes);
  opts.nnodes = static_cast<int>(*nnodes);
  opts.node_rank = static_cast<int>(*node_rank);
  return "";
}

// The workers' communication timeout. See [Note: one timeout, set from the
// launcher] in src/comm/comm_timeout.cpp.
std::string convert_timeout(const RawFlags& raw, LaunchOptions& opts) {
  if (raw.timeout.empty()) {
    // The workers' timeout, inherited: the same bound applies to a stopped worker.
    const char* inherited = std::getenv("FSDP_COMM_TIMEOUT");
    auto seconds = to_seconds(inherited ? inherited : "");
    if (seconds && *seconds > 0) opts.stall_timeout_s = *seconds;
    return "";
  }
  auto timeout = to_seconds(raw.timeout);
  if (!timeout || *timeout <= 0) {
    return fmt::format("--timeout must be a number of seconds greater than 0 and at most 86400, "
                       "got '{}' (e.g. --timeout 600)",
                       raw.timeout);
  }
  opts.comm_timeout_s = raw.timeout;
  opts.stall_timeout_s = *timeout;
  return "";
}

// Where rank 0 hosts the store, and how long stopping a worker may take.
std::string convert_rendezvous_and_grace(const RawFlags& raw, LaunchOptions& opts) {
  auto port = to_long(raw.master_port);
  if (!port || *port < 1 || *port > 65535) {
    return fmt::format("--master-port must be a TCP port from 1 to 65535, got '{}' "
                       "(e.g. --master-port 29500)",
                       raw.master_port);
  }
  if (raw.master_addr.empty()) {
    return "--master-addr is empty; give the host name or IP address of the node that runs "
           "rank 0 (e.g. --master-addr 127.0.0.1)";
  }
  auto grace = to_seconds(raw.grace_period);
  if (!grace) {
    return fmt::format("--grace-period must be a number of seconds from 0 to 86400, got '{}' "
                       "(e.g. --grace-period 5)",
                       raw.grace_period);
  }
  opts.master_addr = raw.master_addr;
  opts.master_port = static_cast<int>(*port);
  opts.grace_period_s = *grace;
  return "";
}

// --standalone owns the rendezvous address; silently ignoring the user's
// choice would be worse than saying so.
std::string check_standalone(const CLI::App& app, int nnodes) {
  if (nnodes != 1) {
    return fmt::format("--standalone runs a single node but --nnodes is {}; drop --standalone "
                       "and give --master-addr/--master-port for a multi-node job",
                       nnodes);
  }
  for (const char* flag : {"--master-addr", "--master-port"}) {
    if (app.count(flag) > 0) {
      return fmt::format("--standalone picks MASTER_ADDR=127.0.0.1 and a free port itself; "
                         "drop {} or drop --standalone",
                         flag);
    }
  }
  return "";
}

// The elastic rendezvous's two waits, and the port after --master-port that
// the workers' store takes.
std::string convert_elastic(const RawFlags& raw, LaunchOptions& opts) {
  if (!opts.elastic) {
    if (raw.rdzv_last_call.empty() && raw.rdzv_timeout.empty()) return "";
    return "--rdzv-last-call and --rdzv-timeout apply to elastic jobs only; give --nnodes as "
           "MIN:MAX (e.g. --nnodes 1:2) or drop them";
  }
  if (opts.standalone) {
    return "--standalone runs a single node without a rendezvous; drop it and give "
           "--master-addr/--master-port for an elastic job";
  }
  if (opts.master_port == 65535) {
    return "--master-port 65535 leaves no port for the workers' store, which an elastic job "
           "puts at --master-port + 1; pick a lower port (e.g. --master-port 29500)";
  }
  for (const auto& [flag, text, seconds] :
       {std::tuple{"--rdzv-last-call", raw.rdzv_last_call, &opts.rdzv_last_call_s},
        std::tuple{"--rdzv-timeout", raw.rdzv_timeout, &opts.rdzv_timeout_s}}) {
    if (text.empty()) continue;
    const auto value = to_seconds(text);
    if (!value) {
      return fmt::format("{} must be a number of seconds from 0 to 86400, got '{}' (e.g. {} 30)",
                         flag, text, flag);
    }
    *seconds = *value;
  }
  return "";
}

std::string convert_max_restarts(const RawFlags& raw, LaunchOptions& opts) {
  auto restarts = to_long(raw.max_restarts);
  if (!restarts || *restarts < 0 || *restarts > kMostRestarts) {
    return fmt::format(
        "--max-restarts must be a whole number from 0 to {}, got '{}' "
        "(e.g. --max-restarts 3)",
        kMostRestarts, raw.max_restarts);
  }
  opts.max_restarts = static_cast<int>(*restarts);
  return "";
}

// Converts and checks the raw flags. Returns an error message, or "" if ok.
std::string convert(const RawFlags& raw, const CLI::App& app, LaunchOptions& opts) {
  std::string error = convert_layout(raw, opts);
  if (error.empty()) error = convert_rendezvous_and_grace(raw, opts);
  if (error.empty()) error = convert_timeout(raw, opts);
  if (error.empty() && raw.standalone) error = check_standalone(app, opts.nnodes);
  if (error.empty()) error = convert_max_restarts(raw, opts);
  opts.standalone = raw.standalone;
  if (error.empty()) error = convert_elastic(raw, opts);
  if (error.empty() && !raw.memory_limit.empty()) {
    const auto bytes = to_bytes(raw.memory_limit);
    if (!bytes) {
      error = fmt::format("--memory-limit '{}' is not a size; pass bytes, or a number with K, M, "
                          "G or T (powers of 1024), e.g. --memory-limit 3G",
                          raw.memory_limit);
    } else {
      opts.memory_limit_bytes = *bytes;
    }
  }
  opts.prefix_output = !raw.no_prefix;
  return error;
}

void add_launcher_flags(CLI::App& app, RawFlags& raw) {
  app.add_option("--nproc-per-node,--nproc_per_node", raw.nproc_per_node,
                 "Workers to start on this node")
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--nnodes", raw.nnodes,
                 "Nodes in the job (one fsdp-run per node), or MIN:MAX for an elastic job "
                 "that goes on with the nodes still there (see ELASTIC JOBS below)")
      ->type_name("N|MIN:MAX")
      ->capture_default_str();
  app.add_option("--node-rank,--node_rank", raw.node_rank,
                 "This node's index, from 0 to nnodes-1; worker i gets "
                 "RANK = node_rank * nproc_per_node + i. Elastic: the node's id (0 hosts "
                 "the rendezvous), from 0 to MAX-1")
      ->type_name("R")
      ->capture_default_str();
  app.add_option("--master-addr,--master_addr", raw.master_addr,
                 "Host of rank 0, exported as MASTER_ADDR")
      ->type_name("HOST")
      ->capture_default_str();
  app.add_option("--master-port,--master_port", raw.master_port,
                 "TCP port on that host, exported as MASTER_PORT")
      ->type_name("PORT")
      ->capture_default_str();
  app.add_flag("--standalone", raw.standalone,
               "Single node: MASTER_ADDR=127.0.0.1 and a free port picked on localhost "
               "(default: off)");
  app.add_flag("--no-prefix,--no_prefix", raw.no_prefix,
               "Let workers write straight to fsdp-run's stdout/stderr, without the "
               "\"[rank R] \" line prefix (default: prefixes on)");
  app.add_option("--grace-period,--grace_period", raw.grace_period,
                 "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->type_name("SECONDS")
      ->capture_default_str();
  app.add_option("--timeout", raw.timeout,
                 "Seconds a worker's rendezvous, group creation or collective may wait for a "
                 "peer before it fails naming that peer; exported as FSDP_COMM_TIMEOUT "
                 "(default: FSDP_COMM_TIMEOUT if set, else 300)")
      ->type_name("SECONDS");
  app.add_option("--memory-limit,--memory_limit", raw.memory_limit,
                 "Each worker's data memory limit (RLIMIT_DATA), e.g. 3G: an allocation past it "
                 "fails in the worker, which reports it, instead of the machine swapping or "
                 "the kernel killing a rank (default: none)")
      ->type_name("SIZE");
  app.add_option("--max-restarts,--max_restarts", raw.max_restarts,
                 "Times the whole group is started again after a worker fails (see "
                 "RESTARTS below)")
      ->type_name("K")
      ->capture_default_str();
  app.add_option("--rdzv-last-call,--rdzv_last_call", raw.rdzv_last_call,
                 "Elastic: once MIN nodes have joined a round, how long it waits for more "
                 "(default: 30)")
      ->type_name("SECONDS");
  app.add_option("--rdzv-timeout,--rdzv_timeout", raw.rdzv_timeout,
                 "Elastic: how long a round waits for MIN nodes before the job fails "
                 "(default: 900)")
      ->type_name("SECONDS");
}

// argv split at the first "--" ourselves: everything after it belongs to
// the worker, even strings that look like launcher flags.
struct SplitArgs {
  std::vector<std::string> launcher_args;
  std::vector<std::string> command;
  bool saw_separator = false;
};

SplitArgs split_at_separator(int argc, char** argv) {
  SplitArgs split;
  for (int i = 1; i < argc; ++i) {
    if (!split.saw_separator && std::strcmp(argv[i], "--") == 0) {
      split.saw_separator = true;
      continue;
    }
    (split.saw_separator ? split.command : split.launcher_args).emplace_back(argv[i]);
  }
  return split;
}

// Settles args.command from what CLI11 left unparsed (torchrun's form
// without "--" starts the program there). Returns an error, or "" if ok.
std::string take_worker_command(const std::vector<std::string>& before_separator,
                                SplitArgs& args) {
  if (!before_separator.empty()) {
    const std::string& first = before_separator.front();
    if (!first.empty() && first[0] == '-') {
      return fmt::format("unknown option '{}' (see fsdp-run --help; the worker command goes "
                         "after '--')",
                         first);
    }
    if (args.saw_separator) {
      return fmt::format("unexpected argument '{}' before '--'; put the program and its "
                         "arguments after '--'",
                         first);
    }
    args.command = before_separator;
  }
  if (args.command.empty() || args.command.front().empty()) {
    return "no program to run; give it after '--', e.g. fsdp-run --nproc-per-node 2 -- "
           "./train --steps 10";
  }
  return "";
}

}  // namespace

ParseResult parse_launch_options(int argc, char** argv) {
  SplitArgs args = split_at_separator(argc, argv);
  RawFlags raw;
  CLI::App app{kDescription, "fsdp-run"};
  app.footer(kFooter);
  auto formatter = std::make_shared<LauncherFormatter>();
  formatter->column_width(36);
  app.formatter(formatter);
  // Without "--", stop at the program name (torchrun's `torchrun ... train.py
  // --lr 1` form) and leave it and its arguments in app.remaining().
  app.prefix_command(true);
  add_launcher_flags(app, raw);

  // CLI11 wants argv order reversed when given a vector.
  std::vector<std::string> reversed(args.launcher_args.rbegin(), args.launcher_args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    std::fputs(app.help().c_str(), stdout);
    return {std::nullopt, 0};
  } catch (const CLI::ParseError& e) {
    print_error(fmt::format("{} (see fsdp-run --help)", e.what()));
    return {std::nullopt, kBadInput};
  }

  LaunchOptions opts;
  std::string error = take_worker_command(app.remaining(), args);
  if (error.empty()) error = convert(raw, app, opts);
  if (!error.empty()) {
    print_error(error);
    return {std::nullopt, kBadInput};
  }
  opts.command = std::move(args.command);
  return {std::move(opts), 0};
}

}  // namespace fsdp_run
