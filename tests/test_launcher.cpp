// fsdp-run, tested as a real process: it launches tests/programs/launcher_probe
// workers, and we check what they saw (environment), what fsdp-run printed
// and its exit status, and how it answers bad input. Failures, signals and
// orphans are in test_launcher_faults.cpp.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "harness/child_process.h"
#include "harness/fsdp_run.h"

namespace {

using namespace std::chrono_literals;
using namespace fsdp::testing;
using Result = ChildResult;

// ---- environment ------------------------------------------------------------

TEST(Launcher, SetsTorchrunEnvironmentPerRank) {
  // A stale RANK in the caller's environment must be replaced, and other
  // variables inherited.
  Result r = run_launcher({"--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "1",
                           "--master-addr", "10.1.2.3", "--master-port", "12345", "--", kProbe,
                           "--print-env"},
                          {"RANK=99", "FSDP_PROBE_INHERIT=yes"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  for (int local = 0; local < 2; ++local) {
    int rank = 1 * 2 + local;
    std::string expected = "[rank " + std::to_string(rank) + "] env RANK=" +
                           std::to_string(rank) + " WORLD_SIZE=6 LOCAL_RANK=" +
                           std::to_string(local) +
                           " LOCAL_WORLD_SIZE=2 GROUP_RANK=1 NODE_RANK=1 GROUP_WORLD_SIZE=3 "
                           "MASTER_ADDR=10.1.2.3 MASTER_PORT=12345 INHERIT=yes";
    std::vector<std::string> out = lines_of(r.out);
    EXPECT_EQ(std::count(out.begin(), out.end(), expected), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "[rank " + std::to_string(rank) + "] stderr-line rank=" +
                                    std::to_string(rank) + "\n"))
        << r.describe();
  }
  // stdout and stderr stay apart.
  EXPECT_FALSE(contains(r.out, "stderr-line")) << r.describe();
  EXPECT_FALSE(contains(r.err, "env RANK=")) << r.describe();
}

TEST(Launcher, AcceptsTorchrunUnderscoreSpellingsAndNoSeparator) {
  // torchrun's own form: underscores, and the program right after the flags.
  Result r = run_launcher({"--nproc_per_node", "2", "--nnodes", "2", "--node_rank", "0",
                           "--master_addr", "node0", "--master_port", "23456", kProbe,
                           "--print-env"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "[rank 1] env RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 "
                              "GROUP_RANK=0 NODE_RANK=0 GROUP_WORLD_SIZE=2 MASTER_ADDR=node0 "
                              "MASTER_PORT=23456"))
      << r.describe();
}

TEST(Launcher, DefaultsAreOneLocalWorkerOnLocalhost29500) {
  Result r = run_launcher({"--", kProbe, "--print-env"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "[rank 0] env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 "
                              "GROUP_RANK=0 NODE_RANK=0 GROUP_WORLD_SIZE=1 "
                              "MASTER_ADDR=127.0.0.1 MASTER_PORT=29500"))
      << r.describe();
  EXPECT_EQ(lines_of(r.out).size(), 1u) << r.describe();
}

// Issue #13, point 3: the communication timeout is a launcher flag, passed to
// the workers as FSDP_COMM_TIMEOUT (read by GroupOptions' default).
TEST(Launcher, TimeoutIsExportedToEveryWorkerAndOtherwiseInherited) {
  Result set = run_launcher({"--nproc-per-node", "2", "--timeout", "42.5", "--", kProbe,
                             "--print-var", "FSDP_COMM_TIMEOUT"},
                            {"FSDP_COMM_TIMEOUT=7"});
  ASSERT_TRUE(set.exited_with(0)) << set.describe();
  for (const char* line : {"[rank 0] var FSDP_COMM_TIMEOUT=42.5", "[rank 1] var FSDP_COMM_TIMEOUT=42.5"}) {
    EXPECT_TRUE(contains(set.out, line)) << set.describe();
  }
  Result inherited = run_launcher({"--", kProbe, "--print-var", "FSDP_COMM_TIMEOUT"},
                                  {"FSDP_COMM_TIMEOUT=7"});
  EXPECT_TRUE(contains(inherited.out, "[rank 0] var FSDP_COMM_TIMEOUT=7")) << inherited.describe();
}

// [Note: data limits under sanitizers]
// ASan and TSan reserve terabytes of shadow memory as a program starts (mmap
// with MAP_NORESERVE), and RLIMIT_DATA counts those mappings: a worker built
// for `make test-sanitize` cannot start under a limit of a few GiB. There
// the limit is set far above the reservations; the check is the same.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr const char* kDataLimit = "64T";
constexpr const char* kDataLimitBytes = "70368744177664";
#else
constexpr const char* kDataLimit = "1.5G";
constexpr const char* kDataLimitBytes = "1610612736";
#endif

// --memory-limit sets every worker's RLIMIT_DATA (fsdp-plan's budgets are per
// rank); without it the workers inherit the launcher's.
TEST(Launcher, MemoryLimitIsEveryWorkersDataLimit) {
  Result set = run_launcher(
      {"--nproc-per-node", "2", "--memory-limit", kDataLimit, "--", kProbe, "--print-data-limit"});
  ASSERT_TRUE(set.exited_with(0)) << set.describe();
  for (const std::string rank : {"0", "1"}) {
    const std::string line = "[rank " + rank + "] data-limit " + kDataLimitBytes;
    EXPECT_TRUE(contains(set.out, line)) << set.describe();
  }
  rlimit ours{};
  getrlimit(RLIMIT_DATA, &ours);
  const std::string expected = ours.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(ours.rlim_cur);
  Result inherited = run_launcher({"--", kProbe, "--print-data-limit"});
  EXPECT_TRUE(contains(inherited.out, "[rank 0] data-limit " + expected)) << inherited.describe();
}

TEST(Launcher, StandalonePicksAFreeLocalPortSharedByAllRanks) {
  Result r = run_launcher({"--standalone", "--nproc-per-node", "2", "--", kProbe, "--print-env"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  std::regex line_re(R"(\[rank (\d)\] env .* MASTER_ADDR=(\S+) MASTER_PORT=(\d+) )");
  std::set<int> ports;
  int ranks_seen = 0;
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (!std::regex_search(line, m, line_re)) continue;
    ++ranks_seen;
    EXPECT_EQ(m[2], "127.0.0.1");
    ports.insert(std::stoi(m[3]));
  }
  ASSERT_EQ(ranks_seen, 2) << r.describe();
  ASSERT_EQ(ports.size(), 1u) << "ranks disagree on MASTER_PORT\n" << r.describe();
  // The kernel hands out ports from its ephemeral range; 29500 is not in the
  // default one, so this also shows the port was picked, not defaulted.
  int port = *ports.begin();
  int low = 0, high = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  ASSERT_TRUE(range >> low >> high);
  EXPECT_GE(port, low);
  EXPECT_LE(port, high);
}

// ---- output ---------------------------------------------------------------

TEST(Launcher, PrefixesWholeLinesWithoutInterleaving) {
  // Each probe line is written in two pieces; fsdp-run must still emit it
  // whole, and never mix two ranks within a line.
  constexpr int kLines = 300;
  Result r = run_launcher({"--nproc-per-node", "3", "--", kProbe, "--lines",
                           std::to_string(kLines)});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  std::regex line_re(R"(\[rank (\d)\] line (\d) (\d+))");
  std::vector<int> next_index(3, 0);
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "mangled line: '" << line << "'";
    int prefix_rank = std::stoi(m[1]);
    ASSERT_EQ(prefix_rank, std::stoi(m[2])) << line;
    ASSERT_EQ(std::stoi(m[3]), next_index[prefix_rank]) << "out of order: " << line;
    ++next_index[prefix_rank];
  }
  EXPECT_EQ(next_index, std::vector<int>(3, kLines));
}

TEST(Launcher, NoPrefixPassesBytesThrough) {
  Result r = run_launcher({"--no-prefix", "--nproc-per-node", "2", "--", kProbe, "--print-env",
                           "--write-cr"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_FALSE(contains(r.out, "[rank")) << r.describe();
  EXPECT_FALSE(contains(r.err, "[rank")) << r.describe();
  int env_lines = 0;
  for (const std::string& line : lines_of(r.out)) env_lines += line.rfind("env RANK=", 0) == 0;
  EXPECT_EQ(env_lines, 2) << r.describe();
  EXPECT_TRUE(contains(r.out, "step 1\rstep 2\r\n")) << r.describe();
  EXPECT_TRUE(contains(r.err, "stderr-line rank=0\n")) << r.describe();
}

TEST(Launcher, CarriageReturnEndsALineAndPartialLastLineIsFlushed) {
  Result r = run_launcher({"--", kProbe, "--write-cr", "--write-partial"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.out, "[rank 0] step 1\r[rank 0] step 2\r\n[rank 0] partial line from 0\n");
}

TEST(Launcher, OverlongLineIsCutEvery64KiB) {
  constexpr size_t kMax = 64 * 1024;
  Result r = run_launcher({"--", kProbe, "--long-line", std::to_string(2 * kMax + 10)});
  ASSERT_TRUE(r.exited_with(0)) << r.describe().substr(0, 2000);
  std::vector<std::string> lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "[rank 0] " + std::string(kMax, 'x'));
  EXPECT_EQ(lines[1], "[rank 0] " + std::string(kMax, 'x'));
  EXPECT_EQ(lines[2], "[rank 0] " + std::string(10, 'x'));
}

// ---- bad input --------------------------------------------------------------------

struct BadInputCase {
  std::vector<std::string> args;
  std::string message;
};

TEST(Launcher, BadInputIsRejectedWithExitCode2AndTheFix) {
  const std::vector<BadInputCase> cases = {
      {{"--nproc-per-node", "0", "--", kProbe},
       "fsdp-run: --nproc-per-node must be a whole number of workers from 1 to 4096, got '0' "
       "(e.g. --nproc-per-node 2)"},
      {{"--nproc-per-node", "auto", "--", kProbe}, "--nproc-per-node must be a whole number"},
      {{"--nnodes", "2", "--node-rank", "2", "--", kProbe},
       "fsdp-run: --node-rank must be in [0, 2) because --nnodes is 2, got '2' (number the "
       "nodes 0..1)"},
      {{"--node-rank", "1", "--", kProbe}, "--node-rank must be in [0, 1)"},
      {{"--master-port", "0", "--", kProbe},
       "fsdp-run: --master-port must be a TCP port from 1 to 65535, got '0'"},
      {{"--master-port", "65536", "--", kProbe}, "got '65536'"},
      {{"--grace-period", "soon", "--", kProbe}, "--grace-period must be a number of seconds"},
      {{"--timeout", "0", "--", kProbe},
       "fsdp-run: --timeout must be a number of seconds greater than 0 and at most 86400, got "
       "'0' (e.g. --timeout 600)"},
      {{"--timeout", "1e9", "--", kProbe}, "--timeout must be a number of seconds"},
      {{"--memory-limit", "3X", "--", kProbe},
       "fsdp-run: --memory-limit '3X' is not a size; pass bytes, or a number with K, M, G or T "
       "(powers of 1024), e.g. --memory-limit 3G"},
      {{"--memory-limit", "0", "--", kProbe}, "--memory-limit '0' is not a size"},
      {{"--nnodes", "3:2", "--", kProbe},
       "fsdp-run: --nnodes must be a whole number of nodes >= 1, or an elastic range MIN:MAX "
       "with 1 <= MIN <= MAX, got '3:2' (e.g. --nnodes 2 or --nnodes 1:2)"},
      {{"--nnodes", "1:", "--", kProbe}, "an elastic range MIN:MAX"},
      {{"--nnodes", "1:2", "--node-rank", "2", "--", kProbe}, "--node-rank must be in [0, 2)"},
      {{"--rdzv-last-call", "5", "--", kProbe},
       "fsdp-run: --rdzv-last-call and --rdzv-timeout apply to elastic jobs only; give --nnodes "
       "as MIN:MAX (e.g. --nnodes 1:2) or drop them"},
      {{"--nnodes", "1:2", "--rdzv-timeout", "never", "--", kProbe},
       "fsdp-run: --rdzv-timeout must be a number of seconds from 0 to 86400, got 'never'"},
      {{"--nnodes", "1:2", "--master-port", "65535", "--", kProbe},
       "leaves no port for the workers' store, which an elastic job puts at --master-port + 1"},
      {{"--standalone", "--nnodes", "1:1", "--", kProbe},
       "--standalone runs a single node without a rendezvous"},
      {{"--nproc-per-node", "2", "--"}, "fsdp-run: no program to run; give it after '--'"},
      {{"--nproc-per-node", "2"}, "fsdp-run: no program to run"},
      {{"--bogus", "--", kProbe}, "fsdp-run: unknown option '--bogus'"},
      {{"stray", "--", kProbe}, "unexpected argument 'stray' before '--'"},
      {{"--standalone", "--master-port", "1234", "--", kProbe},
       "--standalone picks MASTER_ADDR=127.0.0.1 and a free port itself; drop --master-port"},
      {{"--standalone", "--nnodes", "2", "--", kProbe}, "--standalone runs a single node"},
      {{"--max-restarts", "-1", "--", kProbe},
       "fsdp-run: --max-restarts must be a whole number from 0 to 1000000, got '-1' (e.g. "
       "--max-restarts 3)"},
      {{"--max-restarts", "many", "--", kProbe}, "--max-restarts must be a whole number"},
  };
  for (const BadInputCase& c : cases) {
    Result r = run_launcher(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_TRUE(r.exited_with(2)) << "args: " << joined << "\n" << r.describe();
    EXPECT_TRUE(contains(r.err, c.message)) << "args: " << joined << "\nexpected: " << c.message
                                            << "\n" << r.describe();
    EXPECT_EQ(r.out, "") << "args: " << joined;
  }
}

TEST(Launcher, MissingProgramIsReportedBeforeAnythingStarts) {
  Result r = run_launcher({"--nproc-per-node", "2", "--", "fsdp-no-such-program-xyz"});
  EXPECT_TRUE(r.exited_with(127)) << r.describe();
  EXPECT_EQ(r.err,
            "fsdp-run: program 'fsdp-no-such-program-xyz' not found in PATH; give a path such as "
            "./fsdp-no-such-program-xyz or add its directory to PATH\n");

  Result dir_as_program = run_launcher({"--", "/"});
  EXPECT_TRUE(dir_as_program.exited_with(126)) << dir_as_program.describe();
  EXPECT_TRUE(contains(dir_as_program.err, "program '/' cannot be run: it is a directory"))
      << dir_as_program.describe();
}

TEST(Launcher, ProgramThatFailsToExecIsNamedWithTheReason) {
  // Executable bit set but no "#!" line: execve refuses it (ENOEXEC), which
  // only the worker can find out; fsdp-run must pass the reason on.
  TempDir dir("fsdp-launcher");
  std::string script = dir / "no_shebang";
  {
    std::ofstream out(script);
    out << "echo hello\n";
  }
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  Result r = run_launcher({"--nproc-per-node", "2", "--", script});
  EXPECT_TRUE(r.exited_with(126)) << r.describe();
  EXPECT_TRUE(contains(r.err, "fsdp-run: could not start rank 0: cannot execute '" + script +
                                  "': Exec format error"))
      << r.describe();
  EXPECT_EQ(r.out, "") << r.describe();
}

TEST(Launcher, ProgramIsFoundThroughPath) {
  // "launcher_probe" by bare name, found through PATH like execvp would.
  const char* old_path = getenv("PATH");
  std::string path = std::string("PATH=") + FSDP_BIN_DIR + ":" + (old_path ? old_path : "");
  Result r = run_launcher({"--", "launcher_probe", "--print-env"}, {path});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(contains(r.out, "[rank 0] env RANK=0 ")) << r.describe();
}

TEST(Launcher, HelpDocumentsEveryFlagWithItsDefault) {
  Result r = run_launcher({"--help"});
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  for (const char* text :
       {"--nproc-per-node,--nproc_per_node N=1", "--nnodes N|MIN:MAX=1",
        "--node-rank,--node_rank R=0", "--master-addr,--master_addr HOST=127.0.0.1",
        "--master-port,--master_port PORT=29500", "--standalone", "--no-prefix",
        "--grace-period,--grace_period SECONDS=5", "--timeout SECONDS", "FSDP_COMM_TIMEOUT",
        "--memory-limit,--memory_limit SIZE", "RLIMIT_DATA", "-- PROGRAM [ARGS...]", "[rank R]",
        "mpirun", "srun", "--nnodes 2 --node-rank 1"}) {
    EXPECT_TRUE(contains(r.out, text)) << "help lacks '" << text << "'\n" << r.out;
  }
  // [Note: restarts]: the flag, the rules and the variables the workers get.
  for (const char* text : {"--max-restarts,--max_restarts K=0", "RESTARTS", "Same step",
                           "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                           "FSDP_RUN_PROGRESS_FILE", "FSDP_RUN_FAILURE_TIME", "--resume auto"}) {
    EXPECT_TRUE(contains(r.out, text)) << "help lacks '" << text << "'\n" << r.out;
  }
  // [Note: elastic membership]: the flags, who hosts, and what losing a node does.
  for (const char* text :
       {"--rdzv-last-call,--rdzv_last_call SECONDS", "(default: 30)",
        "--rdzv-timeout,--rdzv_timeout SECONDS", "(default: 900)", "ELASTIC JOBS",
        "--master-port + 1", "Losing node 0 ends the job", "--nnodes 1:2 --node-rank 0"}) {
    EXPECT_TRUE(contains(r.out, text)) << "help lacks '" << text << "'\n" << r.out;
  }
}

}  // namespace
