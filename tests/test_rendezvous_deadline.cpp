// Issue #35, points 1 and 4: every store call on the way to a working group
// runs under the rendezvous deadline ([Note: a deadline on every store
// call]), and the ways a group fails to form say who they waited for:
//   - comm::DeadlineStore over a store that never answers, or fails;
//   - rank 0 stopped (SIGSTOP) at several points between the store's
//     connection and the world group's creation, with no launcher: every
//     other rank fails within the timeout, naming what it waited for;
//   - a MASTER_PORT already in use: one message, no raw LibTorch log line.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "comm/deadline_store.h"
#include "harness/assertions.h"
#include "harness/child_process.h"
#include "harness/multiprocess.h"
#include "harness/temp_dir.h"

namespace fsdp {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::ChildResult;
using testing::contains;
using testing::TempDir;

// A store whose calls never return, as a TCPStore's whose server is stopped.
// Its callers' threads are abandoned, so what they wait on lives for ever.
class StalledStore final : public c10d::Store {
 public:
  void set(const std::string&, const std::vector<uint8_t>&) override { stall(); }
  std::vector<uint8_t> get(const std::string&) override { stall(); }
  int64_t add(const std::string&, int64_t) override { stall(); }
  bool deleteKey(const std::string&) override { stall(); }
  bool check(const std::vector<std::string>&) override { stall(); }
  int64_t getNumKeys() override { stall(); }
  void wait(const std::vector<std::string>&) override { stall(); }
  void wait(const std::vector<std::string>&, const std::chrono::milliseconds&) override { stall(); }

 private:
  [[noreturn]] static void stall() {
    static auto* never_set = new std::promise<void>();
    static const std::shared_future<void> never = never_set->get_future().share();
    never.wait();
    std::abort();
  }
};

// A store whose calls fail at once, as a TCPStore's whose server died.
class FailingStore final : public c10d::Store {
 public:
  void set(const std::string&, const std::vector<uint8_t>&) override { fail(); }
  std::vector<uint8_t> get(const std::string&) override { fail(); }
  int64_t add(const std::string&, int64_t) override { fail(); }
  bool deleteKey(const std::string&) override { fail(); }
  bool check(const std::vector<std::string>&) override { fail(); }
  int64_t getNumKeys() override { fail(); }
  void wait(const std::vector<std::string>&) override { fail(); }
  void wait(const std::vector<std::string>&, const std::chrono::milliseconds&) override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::runtime_error("Connection reset by peer"); }
};

c10::intrusive_ptr<c10d::Store> deadline_over(c10::intrusive_ptr<c10d::Store> inner) {
  inner->setTimeout(300ms);
  return c10::make_intrusive<comm::DeadlineStore>(
      std::move(inner), "the store at h:1 (rank 0 serves it)", "is rank 0 stopped?");
}

TEST(DeadlineStore, ACallTheServerNeverAnswersThrowsNamingTheCallAndTheServer) {
  const auto store = deadline_over(c10::make_intrusive<StalledStore>());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROWS_WITH(store->check({"fsdp/readiness/0", "fsdp/readiness/1"}),
                     "the store at h:1 (rank 0 serves it) did not answer check('fsdp/readiness/0', "
                     "'fsdp/readiness/1') within 300 ms: is rank 0 stopped?");
  EXPECT_THROWS_WITH(store->add("count", 1), "did not answer add('count') within 300 ms");
  EXPECT_THROWS_WITH(store->wait({"k"}, 500ms), "did not answer wait('k') within 500 ms");
  EXPECT_THROWS_WITH(store->set("k", std::vector<uint8_t>{1}), "did not answer set('k')");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // a hang, not a speed bound
}

TEST(DeadlineStore, AFailedCallNamesTheCallTheServerAndTheCause) {
  const auto store = deadline_over(c10::make_intrusive<FailingStore>());
  EXPECT_THROWS_WITH(store->get("fsdp/world/0/0"),
                     "the store at h:1 (rank 0 serves it) failed get('fsdp/world/0/0'): "
                     "Connection reset by peer");
}

// ---- real processes ---------------------------------------------------------

const std::string kProbe = std::string(FSDP_BIN_DIR) + "/rendezvous_probe";
constexpr int kTimeoutMs = 3000;
constexpr auto kLimit = 60s;  // past it a rank hung; the test then fails

// Whether `pid` is stopped by a signal: state 'T' in /proc/<pid>/stat.
bool is_stopped(pid_t pid) {
  const std::string stat = testing::read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T';
}

std::vector<std::string> torchrun_env(int rank, int world_size, int port) {
  return {"RANK=" + std::to_string(rank),
          "LOCAL_RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(world_size),
          "LOCAL_WORLD_SIZE=" + std::to_string(world_size),
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(port),
          "OMP_NUM_THREADS=1"};
}

// One point: ranks 1 and 2 must end on their own with exit 2, within the
// timeout plus start-up, naming rank 0's store and what they were doing.
void expect_others_fail_when_rank0_stops_at(const std::string& point) {
  SCOPED_TRACE("rank 0 stopped at '" + point + "'");
  const int port = testing::free_tcp_port();
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    dirs.push_back(std::make_unique<TempDir>("fsdp-rdv"));
    ranks.push_back(std::make_unique<ChildProcess>(
        *dirs.back(), kProbe,
        std::vector<std::string>{"--timeout-ms=" + std::to_string(kTimeoutMs),
                                 "--stop-rank0-at=" + point},
        torchrun_env(rank, 3, port)));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int rank = 1; rank < 3; ++rank) {
    const ChildResult r = ranks[rank]->wait(kLimit);
    ASSERT_TRUE(r.finished) << "rank " << rank << " hung\n" << r.describe();
    EXPECT_TRUE(r.exited_with(2)) << r.describe();
    const std::string& out = r.out;
    EXPECT_TRUE(contains(out, "is rank 0 stopped or hung?")) << r.describe();
    EXPECT_TRUE(contains(out, "127.0.0.1:" + std::to_string(port))) << r.describe();
    EXPECT_TRUE(contains(out, "waited for the others") || contains(out, "announced its arrival") ||
                contains(out, "shared whether it can start") ||
                contains(out, "creating Gloo group 'world'"))
        << "rank " << rank << " does not say what it waited for\n"
        << r.describe();
    if (point == "group" && rank == 1) {
      EXPECT_TRUE(contains(out, "creating Gloo group 'world' (rank 1 of 3) failed"))
          << r.describe();
    }
    EXPECT_FALSE(contains(out, "Exception raised from")) << r.describe();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(kTimeoutMs) + 20s);
  EXPECT_TRUE(is_stopped(ranks[0]->pid())) << "rank 0 never stopped itself at '" << point << "'";
}

// Issue #35, point 1: under torchrun's variables, with no launcher to end a
// stopped rank, rank 1 stayed blocked in the readiness exchange's check().
TEST(RendezvousDeadline, RankZeroStoppedBeforeTheGroupExistsFailsEveryOtherRankNamingIt) {
  for (const char* point : {"arrival", "verdict", "group"}) {
    expect_others_fail_when_rank0_stops_at(point);
  }
}

// Issue #35, point 4: a port in use fails at once, in one message that does
// not speak of a timeout, and no raw glog or c10d log line reaches the user.
TEST(RendezvousDeadline, APortInUseIsOneClearErrorWithNoRawLogLines) {
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(holder, 4), 0);
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  TempDir dir("fsdp-rdv");
  ChildProcess rank0(dir, kProbe, {"--timeout-ms=30000"}, torchrun_env(0, 2, port));
  const ChildResult r = rank0.wait(kLimit);
  ::close(holder);
  ASSERT_TRUE(r.finished) << r.describe();
  EXPECT_TRUE(r.exited_with(2)) << r.describe();
  EXPECT_TRUE(contains(r.out,
                       "could not serve the rendezvous store at MASTER_ADDR:MASTER_PORT = "
                       "127.0.0.1:" +
                           std::to_string(port)))
      << r.describe();
  EXPECT_TRUE(contains(r.out, "choose a free MASTER_PORT")) << r.describe();
  EXPECT_FALSE(contains(r.out, "within 30000 ms")) << r.describe();
  for (const char* raw : {"Logging before InitGoogleLogging", "socket.cpp", "[W "}) {
    EXPECT_FALSE(contains(r.err, raw) || contains(r.out, raw)) << "raw log line: " << raw << "\n"
                                                               << r.describe();
  }
}

}  // namespace
}  // namespace fsdp
