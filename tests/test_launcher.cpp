// fsdp-run, tested as a real process: it launches tests/programs/launcher_probe
// workers, and we check what they saw (environment), what fsdp-run printed,
// its exit status, and that no worker outlives it.

#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kLauncher = FSDP_BIN_DIR "/fsdp-run";
const std::string kProbe = FSDP_BIN_DIR "/launcher_probe";

// Every wait in this file is an upper bound on a path that should end long
// before it; none of them measures speed.
constexpr auto kJobLimit = 60s;
constexpr auto kStopLimit = 10s;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// A live process, not a zombie waiting for a parent that does not reap.
bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Waits until `done()` or the limit; returns done().
template <typename Pred>
bool wait_until(Pred done, std::chrono::seconds limit) {
  auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() >= deadline) return done();
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// A scratch directory for one test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/fsdp_launcher_XXXXXX";
    char* made = mkdtemp(pattern);
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name != "." && name != "..") unlink((path_ + "/" + name).c_str());
      }
      closedir(d);
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct Result {
  int status = -1;  // as from waitpid
  std::string out, err;
  bool finished = false;  // false: we had to kill it at the limit

  bool exited_with(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
  bool killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
  std::string describe() const {
    std::string how = !finished           ? "did not finish in time"
                      : WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status));
    return how + "\n--- stdout ---\n" + out + "--- stderr ---\n" + err;
  }
};

// A running fsdp-run whose stdout/stderr go to files in `dir`.
class Launch {
 public:
  Launch(const TempDir& dir, const std::vector<std::string>& args,
         const std::vector<std::string>& extra_env = {})
      : out_path_(dir.file("launcher.out")), err_path_(dir.file("launcher.err")) {
    std::vector<std::string> argv_s = {kLauncher};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    // Our environment, with `extra_env` ("NAME=value") replacing same-named entries.
    auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
    std::set<std::string> replaced;
    for (const auto& e : extra_env) replaced.insert(name_of(e));
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      if (replaced.count(name_of(*e)) == 0) env_s.emplace_back(*e);
    }
    env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> argv, envp;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    int out_fd = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err_fd = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out_fd, STDOUT_FILENO);
      dup2(err_fd, STDERR_FILENO);
      execve(argv[0], argv.data(), envp.data());
      _exit(99);
    }
    close(out_fd);
    close(err_fd);
  }

  ~Launch() {
    if (!reaped_ && pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }

  // Waits for fsdp-run to exit (SIGKILLing it past `limit`) and collects output.
  Result wait(std::chrono::seconds limit = kJobLimit) {
    Result r;
    auto deadline = Clock::now() + limit;
    while (true) {
      pid_t got = waitpid(pid_, &r.status, WNOHANG);
      if (got == pid_) {
        r.finished = true;
        break;
      }
      if (Clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &r.status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    reaped_ = true;
    r.out = read_file(out_path_);
    r.err = read_file(err_path_);
    return r;
  }

 private:
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

Result run_launcher(const std::vector<std::string>& args,
                    const std::vector<std::string>& extra_env = {}) {
  TempDir dir;
  Launch launch(dir, args, extra_env);
  return launch.wait();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<pid_t> read_pids(const TempDir& dir, const std::string& kind, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::string text = read_file(dir.file(kind + "." + std::to_string(r)));
    pids.push_back(text.empty() ? -1 : static_cast<pid_t>(std::stol(text)));
  }
  return pids;
}

// Every pid must be real (the probe wrote it) and gone within kStopLimit.
void expect_all_gone(const std::vector<pid_t>& pids, const std::string& what) {
  for (size_t r = 0; r < pids.size(); ++r) {
    ASSERT_GT(pids[r], 0) << what << " " << r << " never wrote its pid";
    EXPECT_TRUE(wait_until([&] { return !process_alive(pids[r]); }, kStopLimit))
        << what << " " << r << " (pid " << pids[r] << ") is still running";
  }
}

bool all_files_exist(const TempDir& dir, const std::string& kind, int n) {
  for (int r = 0; r < n; ++r) {
    if (!file_exists(dir.file(kind + "." + std::to_string(r)))) return false;
  }
  return true;
}

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

// ---- failures ---------------------------------------------------------------

TEST(Launcher, FailingWorkerStopsTheOthersAndPassesOnItsExitCode) {
  TempDir dir;
  // Rank 1 waits until every rank (and rank 0's child) is up, then exits 3;
  // the others would sleep for a minute.
  Launch launch(dir, {"--nproc-per-node", "3", "--", kProbe, "--dir", dir.path(), "--spawn-child",
                      "--write-pid", "--wait-all", "3", "--exit-rank", "1", "3", "--sleep",
                      "60"});
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << "fsdp-run did not stop within 10 s after rank 1 failed\n"
                          << r.describe();
  EXPECT_TRUE(r.exited_with(3)) << r.describe();
  std::vector<pid_t> pids = read_pids(dir, "pid", 3);
  EXPECT_TRUE(contains(r.err, "fsdp-run: rank 1 (pid " + std::to_string(pids[1]) +
                                  ") exited with code 3; stopping the other 2 worker(s)"))
      << r.describe();
  expect_all_gone(pids, "rank");
  // The workers' own children go with them (their process group is killed).
  expect_all_gone(read_pids(dir, "child", 3), "child of rank");
}

TEST(Launcher, WorkerKilledBySignalIsNamedWithTheSignal) {
  TempDir dir;
  Launch launch(dir, {"--nproc-per-node", "2", "--", kProbe, "--dir", dir.path(), "--write-pid",
                      "--wait-all", "2", "--sigkill-rank", "1", "--sleep", "60"});
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.exited_with(128 + SIGKILL)) << r.describe();
  std::vector<pid_t> pids = read_pids(dir, "pid", 2);
  EXPECT_TRUE(contains(r.err, "fsdp-run: rank 1 (pid " + std::to_string(pids[1]) +
                                  ") was killed by signal 9 (SIGKILL); stopping the other 1 "
                                  "worker(s)"))
      << r.describe();
  expect_all_gone(pids, "rank");
}

TEST(Launcher, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir;
  Launch launch(dir, {"--nproc-per-node", "2", "--grace-period", "0.5", "--", kProbe, "--dir",
                      dir.path(), "--ignore-term", "--write-pid", "--wait-all", "2",
                      "--exit-rank", "0", "5", "--sleep", "60"});
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.exited_with(5)) << r.describe();
  EXPECT_TRUE(contains(r.err, "fsdp-run: rank 0 (pid ")) << r.describe();
  EXPECT_TRUE(contains(r.err, "rank(s) 1 still running 0.5 s after being told to stop; sending "
                              "SIGKILL"))
      << r.describe();
  expect_all_gone(read_pids(dir, "pid", 2), "rank");
}

TEST(Launcher, AllWorkersSucceedingExitsZeroWithNoLauncherMessages) {
  Result r = run_launcher({"--nproc-per-node", "2", "--", kProbe, "--exit-rank", "7", "1"});
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.err, "") << r.describe();
}

// ---- signals to the launcher ----------------------------------------------------

TEST(Launcher, SigtermToLauncherIsForwardedToEveryWorkerAndItsChildren) {
  TempDir dir;
  // Each worker traps SIGTERM, has a child that traps it too, and on the
  // signal waits for that child before exiting.
  Launch launch(dir, {"--nproc-per-node", "2", "--", kProbe, "--dir", dir.path(), "--trap",
                      "--spawn-child", "--write-pid", "--sleep", "60"});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "pid", 2); }, 30s))
      << "workers never started";
  ASSERT_EQ(kill(launch.pid(), SIGTERM), 0);
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.killed_by(SIGTERM)) << r.describe();
  for (const char* marker : {"term.0", "term.1", "childterm.0", "childterm.1"}) {
    EXPECT_TRUE(file_exists(dir.file(marker))) << "no " << marker << ": SIGTERM did not arrive\n"
                                               << r.describe();
  }
  EXPECT_FALSE(file_exists(dir.file("int.0"))) << r.describe();
  EXPECT_TRUE(contains(r.err, "fsdp-run: got SIGTERM; forwarding it to 2 worker(s)"))
      << r.describe();
  expect_all_gone(read_pids(dir, "pid", 2), "rank");
  expect_all_gone(read_pids(dir, "child", 2), "child of rank");
}

TEST(Launcher, SigintToLauncherIsForwardedAsSigintAndLauncherDiesFromIt) {
  TempDir dir;
  Launch launch(dir, {"--nproc-per-node", "2", "--", kProbe, "--dir", dir.path(), "--trap",
                      "--write-pid", "--sleep", "60"});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "pid", 2); }, 30s))
      << "workers never started";
  ASSERT_EQ(kill(launch.pid(), SIGINT), 0);
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.killed_by(SIGINT)) << r.describe();
  EXPECT_TRUE(file_exists(dir.file("int.0"))) << r.describe();
  EXPECT_TRUE(file_exists(dir.file("int.1"))) << r.describe();
  EXPECT_FALSE(file_exists(dir.file("term.0"))) << "SIGINT arrived as SIGTERM\n" << r.describe();
  expect_all_gone(read_pids(dir, "pid", 2), "rank");
}

TEST(Launcher, SigkilledLauncherLeavesNoOrphans) {
  // fsdp-run cannot clean up after SIGKILL; the workers' death signal must.
  TempDir dir;
  Launch launch(dir, {"--nproc-per-node", "2", "--", kProbe, "--dir", dir.path(), "--write-pid",
                      "--sleep", "60"});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "pid", 2); }, 30s))
      << "workers never started";
  ASSERT_EQ(kill(launch.pid(), SIGKILL), 0);
  Result r = launch.wait(kStopLimit);
  EXPECT_TRUE(r.killed_by(SIGKILL)) << r.describe();
  expect_all_gone(read_pids(dir, "pid", 2), "rank");
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
      {{"--nnodes", "1:4", "--", kProbe}, "fsdp-run has no elastic mode"},
      {{"--nproc-per-node", "2", "--"}, "fsdp-run: no program to run; give it after '--'"},
      {{"--nproc-per-node", "2"}, "fsdp-run: no program to run"},
      {{"--bogus", "--", kProbe}, "fsdp-run: unknown option '--bogus'"},
      {{"stray", "--", kProbe}, "unexpected argument 'stray' before '--'"},
      {{"--standalone", "--master-port", "1234", "--", kProbe},
       "--standalone picks MASTER_ADDR=127.0.0.1 and a free port itself; drop --master-port"},
      {{"--standalone", "--nnodes", "2", "--", kProbe}, "--standalone runs a single node"},
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
  TempDir dir;
  std::string script = dir.file("no_shebang");
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
       {"--nproc-per-node,--nproc_per_node N=1", "--nnodes N=1", "--node-rank,--node_rank R=0",
        "--master-addr,--master_addr HOST=127.0.0.1", "--master-port,--master_port PORT=29500",
        "--standalone", "--no-prefix", "--grace-period,--grace_period SECONDS=5",
        "-- PROGRAM [ARGS...]", "[rank R]", "mpirun", "srun", "--nnodes 2 --node-rank 1"}) {
    EXPECT_TRUE(contains(r.out, text)) << "help lacks '" << text << "'\n" << r.out;
  }
}

}  // namespace
