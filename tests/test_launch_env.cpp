// Reading the launcher's environment (torchrun, OpenMPI, Slurm), and the
// whole bootstrap in real processes: init_process_group_from_env over a
// TCPStore, collectives, and a rank that dies.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>

#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"
#include "harness/assertions.h"
#include "harness/multiprocess.h"

namespace fsdp {
namespace {

// Sets exactly `vars` among the launcher variables for one test and
// restores the process environment afterwards.
class ScopedLaunchEnv {
 public:
  explicit ScopedLaunchEnv(const std::map<std::string, std::string>& vars) {
    for (const char* name : kAll) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(name);
    }
    for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedLaunchEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1); else ::unsetenv(name.c_str());
    }
  }

 private:
  static constexpr const char* kAll[] = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
      "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID"};
  std::map<std::string, std::optional<std::string>> saved_;
};

const std::map<std::string, std::string> kMaster = {{"MASTER_ADDR", "10.0.0.1"},
                                                    {"MASTER_PORT", "29500"}};

std::map<std::string, std::string> with_master(std::map<std::string, std::string> vars) {
  vars.insert(kMaster.begin(), kMaster.end());
  return vars;
}

TEST(LaunchEnv, Torchrun) {
  ScopedLaunchEnv env(with_master(
      {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}}));
  ASSERT_TRUE(launched_distributed());
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(LaunchEnv, OpenMpi) {
  ScopedLaunchEnv env(with_master({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
}

TEST(LaunchEnv, Slurm) {
  ScopedLaunchEnv env(with_master({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "6"},
                                   {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS_PER_NODE", "3"}}));
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 6);
  EXPECT_EQ(e.local_world_size, 3);
}

// Without --ntasks-per-node, srun sets only SLURM_TASKS_PER_NODE.
TEST(LaunchEnv, SlurmLocalSizeFromTasksPerNode) {
  ScopedLaunchEnv env(with_master({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "11"},
                                   {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "4(x2),3"},
                                   {"SLURM_NODEID", "2"}}));
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.local_rank, 1);
}

TEST(LaunchEnv, SlurmTasksPerNodeRepeatsAcrossNodes) {
  ScopedLaunchEnv env(with_master({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "11"},
                                   {"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "4(x2),3"},
                                   {"SLURM_NODEID", "1"}}));
  EXPECT_EQ(read_launch_env().local_world_size, 4);
}

TEST(LaunchEnv, TorchrunWinsWhenSeveralArePresent) {
  ScopedLaunchEnv env(with_master({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"},
                                   {"LOCAL_WORLD_SIZE", "2"}, {"SLURM_PROCID", "7"}}));
  EXPECT_EQ(read_launch_env().source, "torchrun");
}

TEST(LaunchEnv, NothingSet) {
  ScopedLaunchEnv env({});
  EXPECT_FALSE(launched_distributed());
  EXPECT_THROWS_WITH(read_launch_env(), "no launcher environment found. Set RANK, WORLD_SIZE");
}

TEST(LaunchEnv, MissingVariablesAreNamedWithTheConvention) {
  ScopedLaunchEnv env({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"},
                       {"MASTER_ADDR", "127.0.0.1"}});
  EXPECT_THROWS_WITH(read_launch_env(),
                     "the torchrun launch environment (RANK is set) is incomplete: missing "
                     "WORLD_SIZE, MASTER_PORT. torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and "
                     "LOCAL_WORLD_SIZE; MASTER_ADDR and MASTER_PORT must be set as well");
}

TEST(LaunchEnv, SlurmWithoutMasterAddress) {
  ScopedLaunchEnv env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                       {"SLURM_NTASKS_PER_NODE", "2"}});
  EXPECT_THROWS_WITH(read_launch_env(), "slurm launch environment (SLURM_PROCID is set) is "
                                        "incomplete: missing MASTER_ADDR, MASTER_PORT");
}

TEST(LaunchEnv, MalformedAndOutOfRangeValues) {
  {
    ScopedLaunchEnv env(with_master(
        {{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}}));
    EXPECT_THROWS_WITH(read_launch_env(), "environment variable RANK='one' is not an integer");
  }
  {
    ScopedLaunchEnv env(with_master(
        {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}}));
    EXPECT_THROWS_WITH(read_launch_env(), "RANK=2 is not in [0, WORLD_SIZE=2)");
  }
  {
    ScopedLaunchEnv env({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"},
                         {"LOCAL_WORLD_SIZE", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
    EXPECT_THROWS_WITH(read_launch_env(), "MASTER_PORT=70000 is not a TCP port");
  }
}

std::string describe(const std::vector<testing::ProcessResult>& results) {
  std::string out;
  for (const auto& r : results) {
    out += "--- rank " + std::to_string(r.rank) + " exit " + std::to_string(r.exit_code) +
           " signal " + std::to_string(r.term_signal) + "\n" + r.output;
  }
  return out;
}

TEST(MultiProcess, CollectivesOverTcpStore) {
  const auto results = testing::run_processes(std::string(FSDP_BIN_DIR) + "/comm_probe", {}, 3,
                                              std::chrono::seconds(120));
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << describe(results);
    EXPECT_NE(r.output.find("comm_probe rank " + std::to_string(r.rank) + " of 3 (torchrun): ok"),
              std::string::npos)
        << describe(results);
  }
}

TEST(MultiProcess, DeadRankMakesThePeersFailNotHang) {
  const auto results = testing::run_processes(std::string(FSDP_BIN_DIR) + "/comm_probe",
                                              {"--die=1"}, 2, std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
  EXPECT_EQ(results[0].exit_code, 2) << describe(results);
  EXPECT_EQ(results[0].term_signal, 0) << "rank 0 hung and was killed\n" << describe(results);
  EXPECT_NE(results[0].output.find("fsdp: all_gather on group 'world' (rank 0 of 2) failed: "),
            std::string::npos)
      << describe(results);
}

// Issue #13, points 1 and 2 ([Note: a deadline on every rendezvous wait]).
// A node that never starts: rank 0 says every few seconds whom it waits for,
// then fails once within the timeout, naming the missing ranks and node.
TEST(Rendezvous, MissingNodeIsNamedWhileWaitingAndAtTheTimeout) {
  ScopedLaunchEnv env({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                       {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(testing::free_tcp_port())}});
  GroupOptions options;
  options.timeout = std::chrono::seconds(3);
  // Only rank 0 starts: rank 1 (its own node) and ranks 2 and 3 (node 1)
  // never come.
  ::testing::internal::CaptureStderr();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROWS_WITH(init_process_group_from_env(options),
                     "ranks 1, 2, 3 (node_rank 0, 1) never reached the rendezvous at 127.0.0.1:");
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(took, options.timeout + std::chrono::seconds(5));
  EXPECT_NE(err.find("fsdp: waiting for ranks 1, 2, 3 (node_rank 0, 1) at 127.0.0.1:"),
            std::string::npos)
      << err;
}

// A rendezvous server that accepted the connection and never answers (rank 0
// stopped as its store began listening) must not block the others forever.
TEST(Rendezvous, AServerThatNeverAnswersFailsWithinTheTimeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 16), 0);  // the kernel accepts; nobody ever answers
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ScopedLaunchEnv env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                       {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(ntohs(addr.sin_port))}});
  GroupOptions options;
  options.timeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROWS_WITH(init_process_group_from_env(options), "fsdp: rank 1 of 2");
  EXPECT_LT(std::chrono::steady_clock::now() - start, options.timeout + std::chrono::seconds(5));
  // The listener stays open until the process ends: closing it would reset
  // the abandoned rendezvous connection, and LibTorch 1.13's TCPStore client
  // thread ends the process on a reset (std::terminate), as it does for any
  // rank whose rendezvous server dies.
}

}  // namespace
}  // namespace fsdp
