// fsdp-train across real process and network boundaries, checked against a
// one-host run of the same world size:
//   TwoHostNamespaces: two network namespaces joined by a veth pair are two
//     hosts (10.77.0.1 and 10.77.0.2); one fsdp-run per "host" trains over
//     that link (`ip`, from iproute2).
//   MpirunLaunch: OpenMPI's mpirun starts the ranks (openmpi-bin).
// Both need what scripts/install-deps.sh installs; TwoHostNamespaces also
// needs root. CTest labels say so (tests/CMakeLists.txt): "root;netns" and
// "mpirun". Missing tools fail the test by name.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rapidjson/document.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/temp_dir.h"
#include "harness/multiprocess.h"
#include "harness/spawn.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kTrainer = FSDP_BIN_DIR "/fsdp-train";
const std::string kLauncher = FSDP_BIN_DIR "/fsdp-run";
// Upper bounds on runs that end in seconds; never a speed test.
constexpr auto kRunLimit = 50s;
constexpr auto kSetupLimit = 10s;
constexpr int kSteps = 4;

// The same tiny model as test_trainer, on the shipped test corpus.
std::vector<std::string> tiny_training(const std::string& run_dir) {
  return {kTrainer,    "--data",  FSDP_SOURCE_DIR "/tests/data/corpus.txt",
          "--layers",  "2",       "--width",        "32", "--heads", "2",
          "--context", "32",      "--batch",        "8",  "--eval-batches", "1",
          "--warmup",  "2",       "--lr",           "1e-2", "--steps", std::to_string(kSteps),
          "--run-dir", run_dir};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class TempDir : public fsdp::testing::TempDir {
 public:
  TempDir() : fsdp::testing::TempDir("fsdp_multihost") {}
};

// Finds `name` in PATH or the sbin directories (root's tools live there, and
// ctest's PATH may lack them). Empty when absent.
std::string find_program(const std::string& name) {
  std::string dirs = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  dirs += ":/usr/local/sbin:/usr/sbin:/sbin:/usr/local/bin:/usr/bin:/bin";
  std::stringstream in(dirs);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    const fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

std::string require_program(const std::string& name, const std::string& package) {
  const std::string path = find_program(name);
  if (path.empty()) {
    throw std::runtime_error("`" + name + "` is not installed; install the " + package +
                             " package (scripts/install-deps.sh, or `make test`, does)");
  }
  return path;
}

struct Command {
  std::vector<std::string> argv;  // argv[0] is a path
  std::map<std::string, std::string> env;  // added to the test's environment
};

struct Outcome {
  int exit_code = 0;  // -1 when ended by a signal
  int term_signal = 0;
  std::string output;  // stdout and stderr together
};

// The test's environment without any launcher's variables, so that nothing
// of an outer job leaks into the ones started here, plus `extra`.
std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> overrides = {"OMP_NUM_THREADS=1"};  // two ranks share the cores
  for (const auto& [name, value] : extra) overrides.push_back(name + "=" + value);
  return fsdp::testing::environment_with(overrides, fsdp::testing::is_launcher_variable);
}

// Runs `commands` concurrently, each in its own process group, and collects
// each one's output. At `limit`, every group still running gets SIGTERM
// (fsdp-run and mpirun stop their workers), then SIGKILL 3 s later.
std::vector<Outcome> run_concurrently(const std::vector<Command>& commands,
                                      std::chrono::milliseconds limit) {
  struct Child {
    pid_t pid = -1;
    int fd = -1;
    bool exited = false;
  };
  std::vector<Child> children(commands.size());
  std::vector<Outcome> outcomes(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    const fsdp::testing::ScopedFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    fsdp::testing::SpawnOptions options;
    options.stdin_fd = devnull.get();
    options.stdout_fd = options.stderr_fd = fds[1];
    options.own_process_group = true;
    const pid_t pid =
        fsdp::testing::spawn_process(commands[i].argv, child_environment(commands[i].env), options);
    ::close(fds[1]);
    children[i].pid = pid;
    children[i].fd = fds[0];
  }

  const auto start = std::chrono::steady_clock::now();
  bool terminated = false;
  char buffer[4096];
  while (true) {
    std::vector<pollfd> polled;
    std::vector<size_t> owner;
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i].fd >= 0) {
        polled.push_back({children[i].fd, POLLIN, 0});
        owner.push_back(i);
      }
    }
    if (polled.empty()) break;
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (elapsed > limit + 3s) {
      for (size_t i : owner) ::kill(-children[i].pid, SIGKILL);
    } else if (elapsed > limit && !terminated) {
      terminated = true;
      for (size_t i : owner) {
        ::kill(-children[i].pid, SIGTERM);
        outcomes[i].output += "\n[test: stopped after the time limit]\n";
      }
    }
    if (::poll(polled.data(), polled.size(), 200) <= 0) continue;
    for (size_t k = 0; k < polled.size(); ++k) {
      if (polled[k].revents == 0) continue;
      const size_t i = owner[k];
      const ssize_t n = ::read(children[i].fd, buffer, sizeof(buffer));
      if (n > 0) {
        outcomes[i].output.append(buffer, static_cast<size_t>(n));
      } else {
        ::close(children[i].fd);
        children[i].fd = -1;
      }
    }
  }
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    ::waitpid(children[i].pid, &status, 0);
    ::kill(-children[i].pid, SIGKILL);  // anything left in its group
    if (WIFEXITED(status)) {
      outcomes[i].exit_code = WEXITSTATUS(status);
    } else {
      outcomes[i].exit_code = -1;
      outcomes[i].term_signal = WTERMSIG(status);
    }
  }
  return outcomes;
}

Outcome run_one(const Command& command, std::chrono::milliseconds limit) {
  return run_concurrently({command}, limit).front();
}

std::string describe(const std::vector<std::string>& argv, const Outcome& o) {
  std::string text = "$";
  for (const auto& a : argv) text += " " + a;
  text += "\nexit " + std::to_string(o.exit_code);
  if (o.term_signal != 0) text += " (signal " + std::to_string(o.term_signal) + ")";
  return text + "\n" + o.output + "\n";
}

// Per-step training losses from a run dir's metrics.jsonl.
std::vector<double> read_losses(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  std::vector<double> losses;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    rapidjson::Document j;
    j.Parse<rapidjson::kParseFullPrecisionFlag>(line.c_str());
    EXPECT_TRUE(!j.HasParseError() && j.IsObject() && j.HasMember("loss")) << line;
    losses.push_back(j.HasParseError() || !j.IsObject() || !j.HasMember("loss") ? 0.0 : j["loss"].GetDouble());
  }
  return losses;
}

// The reference: two ranks on one host, over loopback.
std::vector<double> single_host_losses(const std::string& run_dir) {
  const Command command{concat({kLauncher, "--standalone", "--nproc-per-node", "2", "--"},
                               tiny_training(run_dir)),
                        {}};
  const Outcome o = run_one(command, kRunLimit);
  EXPECT_EQ(o.exit_code, 0) << describe(command.argv, o);
  return read_losses(run_dir);
}

// The same world size, the same data and the same reduction order (Gloo's
// ring over ranks 0, 1) on both sides, in fp32: only the transport differs,
// so the losses agree bitwise. The 1e-5 relative bound is what the test
// would accept if a transport ever split messages differently; a mismatch
// beyond bitwise is reported by the second check.
void expect_same_losses(const std::vector<double>& got, const std::vector<double>& expected,
                        const std::string& what) {
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps)) << what << ": metrics.jsonl lines";
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps)) << "reference metrics.jsonl lines";
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - expected[i]),
              1e-5 * std::max(std::fabs(got[i]), std::fabs(expected[i])))
        << what << ", step " << i + 1 << ": " << got[i] << " vs " << expected[i];
    EXPECT_EQ(got[i], expected[i]) << what << ", step " << i + 1
                                   << ": not bitwise equal to the single-host run";
  }
}

// Two network namespaces, `host0` (10.77.0.1/24) and `host1` (10.77.0.2/24),
// joined by a veth pair, with lo up in each. Names carry the pid, so
// concurrent test processes do not collide; the addresses live inside the
// namespaces, so they do not either. Removed in the destructor (deleting a
// namespace deletes its end of the veth pair, and with it the pair).
class TwoHosts {
 public:
  static constexpr const char* kAddress[2] = {"10.77.0.1", "10.77.0.2"};

  TwoHosts() : ip_(require_program("ip", "iproute2")) {
    const std::string id = std::to_string(::getpid());
    names_[0] = "fsdp_mh" + id + "_0";
    names_[1] = "fsdp_mh" + id + "_1";
    const std::string link[2] = {"fmh" + id + "a", "fmh" + id + "b"};  // <= 15 characters
    try {
      ip({"netns", "add", names_[0]});
      created_[0] = true;
      ip({"netns", "add", names_[1]});
      created_[1] = true;
      ip({"link", "add", link[0], "netns", names_[0], "type", "veth", "peer", "name", link[1],
          "netns", names_[1]});
      for (int h = 0; h < 2; ++h) {
        ip({"-n", names_[h], "addr", "add", std::string(kAddress[h]) + "/24", "dev", link[h]});
        ip({"-n", names_[h], "link", "set", "lo", "up"});
        ip({"-n", names_[h], "link", "set", link[h], "up"});
      }
    } catch (...) {
      remove();
      throw;
    }
  }
  ~TwoHosts() { remove(); }

  // `argv` run inside host `h`'s namespace.
  std::vector<std::string> on_host(int h, const std::vector<std::string>& argv) const {
    return concat({ip_, "netns", "exec", names_[h]}, argv);
  }

 private:
  void ip(const std::vector<std::string>& args) const {
    const Command command{concat({ip_}, args), {}};
    const Outcome o = run_one(command, kSetupLimit);
    if (o.exit_code != 0) {
      throw std::runtime_error("setting up the two-host network failed (this test needs root, "
                               "or CAP_NET_ADMIN and CAP_SYS_ADMIN):\n" +
                               describe(command.argv, o));
    }
  }
  void remove() {
    for (int h = 1; h >= 0; --h) {
      if (created_[h]) {
        run_one({{ip_, "netns", "del", names_[h]}, {}}, kSetupLimit);
        created_[h] = false;
      }
    }
  }

  std::string ip_;
  std::string names_[2];
  bool created_[2] = {false, false};
};

TEST(Multihost, TwoHostNamespaces) {
  TempDir tmp;
  const std::vector<double> expected = single_host_losses(tmp / "single_host");
  ASSERT_FALSE(HasFailure());

  TwoHosts hosts;
  // A fresh namespace has nothing listening: any port is free in it.
  const std::string port = "29500";
  // One run dir for both hosts, as on a cluster's shared filesystem (every
  // rank writes its shard of the final checkpoint there).
  const std::string run_dir = tmp / "two_hosts";
  std::vector<Command> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back({hosts.on_host(node, concat({kLauncher, "--nnodes", "2", "--node-rank",
                                                 std::to_string(node), "--nproc-per-node", "1",
                                                 "--master-addr", TwoHosts::kAddress[0],
                                                 "--master-port", port, "--"},
                                                tiny_training(run_dir))),
                     {}});
  }
  const std::vector<Outcome> outcomes = run_concurrently(nodes, kRunLimit);
  for (int node = 0; node < 2; ++node) {
    ASSERT_EQ(outcomes[node].exit_code, 0)
        << "host " << node << ":\n"
        << describe(nodes[node].argv, outcomes[node]) << "host " << 1 - node << ":\n"
        << describe(nodes[1 - node].argv, outcomes[1 - node]);
  }
  // Each rank's Gloo device bound its own host's address, not 127.0.0.1.
  expect_same_losses(read_losses(run_dir), expected, "two hosts over a veth pair");
}

// "mpirun (Open MPI) 5.0.7" -> 5; 0 if the output says no version.
int openmpi_major_version(const std::string& mpirun) {
  const Outcome o = run_one(Command{{mpirun, "--version"}, {}}, std::chrono::seconds(30));
  const size_t at = o.output.find("(Open MPI) ");
  return at == std::string::npos ? 0 : std::atoi(o.output.c_str() + at + 11);
}

TEST(Multihost, MpirunLaunch) {
  const std::string mpirun = require_program("mpirun", "openmpi-bin");
  TempDir tmp;
  const std::vector<double> expected = single_host_losses(tmp / "single_host");
  ASSERT_FALSE(HasFailure());

  // As root in a container: --allow-run-as-root; --oversubscribe for more
  // ranks than cores; no binding (other jobs share the cores); OpenMPI's own
  // wire-up over loopback only (fsdp-train does not call MPI, it reads
  // OMPI_COMM_WORLD_* and meets at MASTER_ADDR:MASTER_PORT).
  const std::string port = std::to_string(fsdp::testing::free_tcp_port());
  const std::string run_dir = tmp / "mpirun";
  Command command{{mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                   "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"},
                  {}};
  // OpenMPI 5 (Debian 13) wires up through PRRTE, which refuses the old
  // oob_tcp_if_include and, in a container, finds no usable interface unless
  // given the loopback network in its own variable.
  if (openmpi_major_version(mpirun) >= 5) {
    command.env["PRTE_MCA_prte_if_include"] = "127.0.0.1/8";
  } else {
    command.argv = concat(command.argv, {"--mca", "oob_tcp_if_include", "lo"});
  }
  command.argv = concat(command.argv, {"-np", "2", "-x", "MASTER_ADDR=127.0.0.1", "-x",
                                       "MASTER_PORT=" + port, "-x", "OMP_NUM_THREADS=1"});
  command.argv = concat(command.argv, tiny_training(run_dir));
  const Outcome o = run_one(command, kRunLimit);
  // mpirun exits 0 only when every rank did.
  ASSERT_EQ(o.exit_code, 0) << describe(command.argv, o);
  EXPECT_NE(o.output.find("ranks     2 (openmpi)"), std::string::npos)
      << "fsdp-train did not see the OpenMPI launch:\n" << o.output;
  expect_same_losses(read_losses(run_dir), expected, "mpirun -np 2");
}

}  // namespace
