// fsdp-run when things go wrong: a failing or killed worker stops the
// others and is named, signals to the launcher reach every worker and its
// children, no worker outlives the launcher, even a SIGKILLed one, and an
// elastic job goes on without a lost node.

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness/child_process.h"
#include "harness/fsdp_run.h"
#include "harness/multiprocess.h"

namespace {

using namespace std::chrono_literals;
using namespace fsdp::testing;
using Result = ChildResult;

std::vector<pid_t> read_pids(const TempDir& dir, const std::string& kind, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    std::string text = read_file(dir / (kind + "." + std::to_string(r)));
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
    if (!file_exists(dir / (kind + "." + std::to_string(r)))) return false;
  }
  return true;
}

// Whether `pid` is stopped by a signal: state 'T' in /proc/<pid>/stat.
bool is_stopped(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
}

// ---- failures ---------------------------------------------------------------

TEST(LauncherFaults, FailingWorkerStopsTheOthersAndPassesOnItsExitCode) {
  TempDir dir("fsdp-launcher");
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

TEST(LauncherFaults, WorkerKilledBySignalIsNamedWithTheSignal) {
  TempDir dir("fsdp-launcher");
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

// Issue #13, point 1 ([Note: a stopped worker]): a worker stopped by a signal
// makes no progress and never exits. fsdp-run names it and ends the job
// within the timeout plus the grace period, exiting 128+9 as for any worker
// it killed (issue #35: it exited 1).
TEST(LauncherFaults, WorkerStoppedLongerThanTheTimeoutIsNamedAndTheJobEnds) {
  TempDir dir("fsdp-launcher");
  const auto start = std::chrono::steady_clock::now();
  Launch launch(dir, {"--nproc-per-node", "2", "--timeout", "2", "--", kProbe, "--dir",
                      dir.path(), "--write-pid", "--wait-all", "2", "--sigstop-rank", "1",
                      "--sleep", "60"});
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s + 5s + 2s) << r.describe();
  EXPECT_TRUE(r.exited_with(128 + SIGKILL)) << r.describe();
  std::vector<pid_t> pids = read_pids(dir, "pid", 2);
  EXPECT_TRUE(contains(r.err, "fsdp-run: rank 1 (pid " + std::to_string(pids[1]) +
                                  ") has been stopped by a signal for 2 s, longer than the "
                                  "timeout (--timeout or FSDP_COMM_TIMEOUT); killed it"))
      << r.describe();
  expect_all_gone(pids, "rank");
}

// A worker continued before the timeout is left alone.
TEST(LauncherFaults, WorkerContinuedInTimeIsLeftAlone) {
  TempDir dir("fsdp-launcher");
  Launch launch(dir, {"--nproc-per-node", "2", "--timeout", "30", "--", kProbe, "--dir",
                      dir.path(), "--write-pid", "--wait-all", "2", "--sigstop-rank", "1",
                      "--sleep", "0.2"});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "pid", 2); }, kStopLimit));
  const pid_t stopped = read_pids(dir, "pid", 2)[1];
  ASSERT_TRUE(wait_until([&] { return is_stopped(stopped); }, kStopLimit));
  std::this_thread::sleep_for(500ms);
  ASSERT_EQ(::kill(stopped, SIGCONT), 0);
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_FALSE(contains(r.err, "stopped by a signal")) << r.describe();
}

TEST(LauncherFaults, WorkerIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TempDir dir("fsdp-launcher");
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

TEST(LauncherFaults, AllWorkersSucceedingExitsZeroWithNoLauncherMessages) {
  Result r = run_launcher({"--nproc-per-node", "2", "--", kProbe, "--exit-rank", "7", "1"});
  EXPECT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_EQ(r.err, "") << r.describe();
}

// ---- signals to the launcher ----------------------------------------------------

TEST(LauncherFaults, SigtermToLauncherIsForwardedToEveryWorkerAndItsChildren) {
  TempDir dir("fsdp-launcher");
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
    EXPECT_TRUE(file_exists(dir / marker)) << "no " << marker << ": SIGTERM did not arrive\n"
                                               << r.describe();
  }
  EXPECT_FALSE(file_exists(dir / "int.0")) << r.describe();
  EXPECT_TRUE(contains(r.err, "fsdp-run: got SIGTERM; forwarding it to 2 worker(s)"))
      << r.describe();
  expect_all_gone(read_pids(dir, "pid", 2), "rank");
  expect_all_gone(read_pids(dir, "child", 2), "child of rank");
}

TEST(LauncherFaults, SigintToLauncherIsForwardedAsSigintAndLauncherDiesFromIt) {
  TempDir dir("fsdp-launcher");
  Launch launch(dir, {"--nproc-per-node", "2", "--", kProbe, "--dir", dir.path(), "--trap",
                      "--write-pid", "--sleep", "60"});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "pid", 2); }, 30s))
      << "workers never started";
  ASSERT_EQ(kill(launch.pid(), SIGINT), 0);
  Result r = launch.wait(kStopLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.killed_by(SIGINT)) << r.describe();
  EXPECT_TRUE(file_exists(dir / "int.0")) << r.describe();
  EXPECT_TRUE(file_exists(dir / "int.1")) << r.describe();
  EXPECT_FALSE(file_exists(dir / "term.0")) << "SIGINT arrived as SIGTERM\n" << r.describe();
  expect_all_gone(read_pids(dir, "pid", 2), "rank");
}

// ---- restarts (issue #33, point 1) -----------------------------------------

// How many times `rank` printed TORCHELASTIC_RESTART_COUNT=`count`.
int starts_seen(const std::string& out, int rank, int count) {
  const std::string line =
      "[rank " + std::to_string(rank) + "] var TORCHELASTIC_RESTART_COUNT=" + std::to_string(count);
  int seen = 0;
  for (const std::string& l : lines_of(out)) seen += l == line;
  return seen;
}

// [Note: restarts]: a failed group is stopped and started again, with the
// torchrun variables counting the starts, until --max-restarts runs out;
// the job then exits with the last failure's code.
TEST(LauncherFaults, FailedGroupStartsAgainUntilTheRestartsRunOut) {
  TempDir dir("fsdp-launcher");
  Launch launch(
      dir, {"--nproc-per-node", "2", "--max-restarts", "2", "--", kProbe, "--print-var",
            "TORCHELASTIC_RESTART_COUNT", "--print-var", "TORCHELASTIC_MAX_RESTARTS", "--print-var",
            "FSDP_RUN_FAILURE_TIME", "--exit-rank", "1", "3", "--sleep", "60"});
  Result r = launch.wait(kJobLimit);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.exited_with(3)) << r.describe();
  for (int count = 0; count <= 2; ++count) {
    EXPECT_EQ(starts_seen(r.out, 1, count), 1) << "start " << count << "\n" << r.describe();
  }
  EXPECT_EQ(starts_seen(r.out, 1, 3), 0) << r.describe();
  EXPECT_TRUE(contains(r.out, "[rank 1] var TORCHELASTIC_MAX_RESTARTS=2")) << r.describe();
  // The first start has no failure before it; the restarts are told its time.
  EXPECT_TRUE(contains(r.out, "[rank 1] var FSDP_RUN_FAILURE_TIME=unset")) << r.describe();
  EXPECT_TRUE(contains(r.out, "[rank 1] var FSDP_RUN_FAILURE_TIME=1")) << r.describe();
  for (const char* text :
       {"fsdp-run: restart 1 of 2: rank 1 exited with code 3; the group stopped in ",
        "fsdp-run: restart 2 of 2: rank 1 exited with code 3; the group stopped in ",
        "fsdp-run: rank 1 exited with code 3; no restarts left (--max-restarts 2 used up)"}) {
    EXPECT_TRUE(contains(r.err, text)) << text << "\n" << r.describe();
  }
}

// Ctrl-C means stop, restarts left or not: while the group runs, and while
// a failed group is being stopped (where a restart would otherwise follow).
TEST(LauncherFaults, SigintToLauncherWithRestartsLeftStopsWithoutRestarting) {
  {
    TempDir dir("fsdp-launcher");
    Launch launch(
        dir, {"--nproc-per-node", "2", "--max-restarts", "3", "--", kProbe, "--print-var",
              "TORCHELASTIC_RESTART_COUNT", "--dir", dir.path(), "--write-pid", "--sleep", "60"});
    ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "pid", 2); }, 30s));
    ASSERT_EQ(kill(launch.pid(), SIGINT), 0);
    Result r = launch.wait(kStopLimit);
    ASSERT_TRUE(r.finished) << r.describe();
    EXPECT_TRUE(r.killed_by(SIGINT)) << r.describe();
    EXPECT_FALSE(contains(r.err, "restart")) << r.describe();
    EXPECT_EQ(starts_seen(r.out, 0, 1) + starts_seen(r.out, 1, 1), 0) << r.describe();
  }
  {
    // Rank 1 fails; rank 0 ignores the SIGTERM that stops it, so the stop
    // waits out a long grace period, and the SIGINT arrives inside it.
    TempDir dir("fsdp-launcher");
    Launch launch(dir, {"--nproc-per-node",
                        "2",
                        "--max-restarts",
                        "3",
                        "--grace-period",
                        "30",
                        "--",
                        kProbe,
                        "--print-var",
                        "TORCHELASTIC_RESTART_COUNT",
                        "--dir",
                        dir.path(),
                        "--ignore-term",
                        "--write-pid",
                        "--wait-all",
                        "2",
                        "--exit-rank",
                        "1",
                        "3",
                        "--sleep",
                        "60"});
    ASSERT_TRUE(wait_until(
        [&] { return contains(read_file(dir / "child.err"), "stopping the other 1 worker(s)"); },
        30s))
        << read_file(dir / "child.err");
    ASSERT_EQ(kill(launch.pid(), SIGINT), 0);
    Result r = launch.wait(kStopLimit);
    ASSERT_TRUE(r.finished) << r.describe();
    EXPECT_TRUE(r.exited_with(3)) << r.describe();
    EXPECT_FALSE(contains(r.err, "restart 1")) << r.describe();
    EXPECT_TRUE(contains(r.err,
                         "fsdp-run: rank 1 exited with code 3; not restarting: fsdp-run "
                         "itself was told to stop (SIGINT, SIGTERM or SIGHUP)"))
        << r.describe();
    EXPECT_EQ(starts_seen(r.out, 0, 1) + starts_seen(r.out, 1, 1), 0) << r.describe();
    expect_all_gone(read_pids(dir, "pid", 2), "rank");
  }
}

TEST(LauncherFaults, SigkilledLauncherLeavesNoOrphans) {
  // fsdp-run cannot clean up after SIGKILL; the workers' death signal must.
  TempDir dir("fsdp-launcher");
  Launch launch(dir, {"--nproc-per-node", "2", "--", kProbe, "--dir", dir.path(), "--write-pid",
                      "--sleep", "60"});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "pid", 2); }, 30s))
      << "workers never started";
  ASSERT_EQ(kill(launch.pid(), SIGKILL), 0);
  Result r = launch.wait(kStopLimit);
  EXPECT_TRUE(r.killed_by(SIGKILL)) << r.describe();
  expect_all_gone(read_pids(dir, "pid", 2), "rank");
}

// ---- elastic jobs (issue #33, point 2) --------------------------------------

// A worker that says where it sits and waits to be stopped; with
// `first_start_only`, a restarted one exits 0 at once.
std::vector<std::string> elastic_worker(bool first_start_only) {
  const std::string wait = first_start_only
                               ? "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then sleep 60; fi"
                               : "sleep 60";
  return {"/bin/sh", "-c",
          "echo start rank=$RANK world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT; " + wait};
}

// One node of a --nnodes 1:2 job of 2 workers per node at `port`.
std::vector<std::string> elastic_node(int node, int port, const std::vector<std::string>& worker,
                                      const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {
      "--nnodes",         "1:2", "--node-rank",    std::to_string(node),
      "--nproc-per-node", "2",   "--master-port",  std::to_string(port),
      "--rdzv-last-call", "1",   "--grace-period", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("--");
  args.insert(args.end(), worker.begin(), worker.end());
  return args;
}

bool node_started(const TempDir& dir, int first_rank) {
  return contains(read_file(dir / "child.out"),
                  "[rank " + std::to_string(first_rank + 1) + "] start rank=");
}

// Both nodes of a --nnodes 1:2 job running `worker`; node 0 restarts twice.
struct TwoNodes {
  explicit TwoNodes(const std::vector<std::string>& worker)
      : node0(dir0, elastic_node(0, port, worker, {"--max-restarts", "2"})),
        node1(dir1, elastic_node(1, port, worker)) {}
  bool started() const { return node_started(dir0, 0) && node_started(dir1, 2); }

  TempDir dir0{"fsdp-elastic"}, dir1{"fsdp-elastic"};
  int port = free_tcp_ports(2);  // the rendezvous, and the workers' store after it
  Launch node0, node1;
};

// [Note: elastic membership]: node 1's fsdp-run is killed with its workers;
// node 0 restarts the job with the nodes left, renumbered.
TEST(LauncherFaults, ElasticJobGoesOnWithTheNodesLeftWhenOneIsLost) {
  TwoNodes job(elastic_worker(true));
  ASSERT_TRUE(wait_until([&] { return job.started(); }, 30s))
      << read_file(job.dir0 / "child.err") << read_file(job.dir1 / "child.err");
  EXPECT_TRUE(
      contains(read_file(job.dir1 / "child.out"), "[rank 3] start rank=3 world=4 restart=0"));
  ASSERT_EQ(kill(job.node1.pid(), SIGKILL), 0);
  EXPECT_TRUE(job.node1.wait(kStopLimit).killed_by(SIGKILL));
  Result r = job.node0.wait(kJobLimit);
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  for (const char* text :
       {"[rank 0] start rank=0 world=4 restart=0", "[rank 1] start rank=1 world=2 restart=1"}) {
    EXPECT_TRUE(contains(r.out, text)) << text << "\n" << r.describe();
  }
  for (const char* text :
       {"fsdp-run: round 1: 2 node(s), world size 4",
        "fsdp-run: restart 1 of 2: rank 2 was lost with node 1: its fsdp-run's connection "
        "closed (the agent was killed or its machine is gone); the group stopped in ",
        "fsdp-run: round 2: 1 node(s), world size 2"}) {
    EXPECT_TRUE(contains(r.err, text)) << text << "\n" << r.describe();
  }
}

// A lost node that comes back joins at the next restart: here, the one
// after rank 0 fails in the round that went on without it.
TEST(LauncherFaults, ElasticNodeThatComesBackRejoinsAtTheNextRestart) {
  TempDir dir0("fsdp-elastic"), dir1("fsdp-elastic"), dir1_again("fsdp-elastic");
  const int port = free_tcp_ports(2);
  const std::vector<std::string> worker = {
      "/bin/sh", "-c",
      "echo start rank=$RANK world=$WORLD_SIZE restart=$TORCHELASTIC_RESTART_COUNT; "
      "case $TORCHELASTIC_RESTART_COUNT in 0) sleep 60;; "
      "1) sleep 5; if [ $RANK = 0 ]; then exit 3; fi; sleep 60;; esac"};
  Launch node0(dir0, elastic_node(0, port, worker, {"--max-restarts", "3"}));
  {
    Launch node1(dir1, elastic_node(1, port, worker));
    ASSERT_TRUE(wait_until([&] { return node_started(dir1, 2); }, 30s));
    ASSERT_EQ(kill(node1.pid(), SIGKILL), 0);
  }
  ASSERT_TRUE(wait_until(
      [&] { return contains(read_file(dir0 / "child.err"), "round 2: 1 node(s), world size 2"); },
      30s))
      << read_file(dir0 / "child.err");
  Launch node1_again(dir1_again, elastic_node(1, port, worker));
  Result r = node0.wait(kJobLimit);
  Result again = node1_again.wait(kStopLimit);
  ASSERT_TRUE(r.exited_with(0)) << r.describe();
  EXPECT_TRUE(again.exited_with(0)) << again.describe();
  for (const char* text : {"fsdp-run: restart 2 of 3: rank 0 exited with code 3",
                           "fsdp-run: round 3: 2 node(s), world size 4"}) {
    EXPECT_TRUE(contains(r.err, text)) << text << "\n" << r.describe();
  }
  EXPECT_TRUE(contains(again.out, "[rank 3] start rank=3 world=4 restart=2")) << again.describe();
}

// Node 0 hosts the rendezvous: the others cannot go on without it.
TEST(LauncherFaults, ElasticJobThatLosesNodeZeroEndsOnTheOthersNamingIt) {
  TwoNodes job(elastic_worker(false));
  ASSERT_TRUE(wait_until([&] { return job.started(); }, 30s));
  ASSERT_EQ(kill(job.node0.pid(), SIGKILL), 0);
  Result r = job.node1.wait(kStopLimit);
  EXPECT_TRUE(r.exited_with(1)) << r.describe();
  EXPECT_TRUE(contains(
      r.err, "fsdp-run: lost the connection to node 0 (127.0.0.1:" + std::to_string(job.port) +
                 "), which hosts the rendezvous; an elastic job cannot go on "
                 "without node 0"))
      << r.describe();
}

// Ctrl-C to node 0 ends the job on every node, restarts left or not.
TEST(LauncherFaults, SigintToElasticNodeZeroEndsTheJobEverywhereWithoutRestarting) {
  TwoNodes job(elastic_worker(false));
  ASSERT_TRUE(wait_until([&] { return job.started(); }, 30s));
  ASSERT_EQ(kill(job.node0.pid(), SIGINT), 0);
  Result r0 = job.node0.wait(kStopLimit);
  Result r1 = job.node1.wait(kStopLimit);
  EXPECT_TRUE(r0.killed_by(SIGINT)) << r0.describe();
  EXPECT_FALSE(contains(r0.err, "restart")) << r0.describe();
  EXPECT_TRUE(r1.exited_with(128 + SIGINT)) << r1.describe();
  EXPECT_TRUE(contains(r1.err, "fsdp-run: node 0's fsdp-run was told to stop; the job ends"))
      << r1.describe();
}

}  // namespace
