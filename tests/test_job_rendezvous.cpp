// fsdp::JobRendezvous: ranks meet, share whether each can start, and only
// then create the world group ([Note: ranks stop together on a problem one of
// them found]). Each rank is a thread with its own LaunchEnv and its own
// connection to one TCPStore on 127.0.0.1, as ranks of one host would be.

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/comm/job_rendezvous.h"
#include "harness/assertions.h"
#include "harness/multiprocess.h"

namespace fsdp {
namespace {

using namespace std::chrono_literals;

constexpr auto kTimeout = std::chrono::milliseconds(20000);

LaunchEnv rank_env(int rank, int world_size, int port) {
  LaunchEnv env;
  env.rank = rank;
  env.world_size = world_size;
  env.local_rank = rank;
  env.local_world_size = world_size;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.source = "torchrun";
  return env;
}

// Runs `body(rank)` on `world_size` threads and rethrows the first failure
// as a test failure naming the rank.
void on_ranks(int world_size, const std::function<void(int)>& body) {
  std::vector<std::string> failures(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank);
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world_size; ++rank) {
    EXPECT_EQ(failures[rank], "") << "rank " << rank;
  }
}

TEST(JobRendezvous, WhenEveryRankIsReadyTheWorldGroupWorks) {
  const int port = testing::free_tcp_port();
  on_ranks(3, [&](int rank) {
    const JobRendezvous meeting(rank_env(rank, 3, port), /*problems=*/{}, kTimeout);
    EXPECT_TRUE(meeting.not_ready().empty());
    GroupOptions options;
    options.timeout = kTimeout;
    const ProcessGroupPtr world = meeting.create_world(options);
    ASSERT_EQ(world->rank(), rank);
    ASSERT_EQ(world->size(), 3);
    at::Tensor t = at::full({2}, rank + 1.0, at::kFloat);
    world->all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_EQ(t[0].item<float>(), 6.0f);
  });
}

// Rank 2's data is missing and rank 1 has two problems: every rank, ready
// or not, learns both, with their hosts and in rank order, and none may
// create the world.
TEST(JobRendezvous, EveryRankLearnsWhichRanksCannotStartAndWhy) {
  const int port = testing::free_tcp_port();
  const std::vector<std::vector<std::string>> problems = {
      {}, {"no GPU is visible", "run dir 'x' cannot be created"}, {"data file 'c.txt' is missing"},
      {}};
  on_ranks(4, [&](int rank) {
    const JobRendezvous meeting(rank_env(rank, 4, port), problems[rank], kTimeout);
    const std::vector<RankNotReady>& not_ready = meeting.not_ready();
    ASSERT_EQ(not_ready.size(), 2u);
    EXPECT_EQ(not_ready[0].rank, 1);
    EXPECT_EQ(not_ready[0].problems, problems[1]);
    EXPECT_EQ(not_ready[1].rank, 2);
    EXPECT_EQ(not_ready[1].problems, problems[2]);
    EXPECT_FALSE(not_ready[0].host.empty());
    EXPECT_THROWS_WITH(meeting.create_world(GroupOptions{}),
                       "rank 1: no GPU is visible); stop instead");
  });
}

// Rank 1 never comes: rank 0, with a problem of its own, still ends within
// the timeout, naming who is missing, rather than waiting on.
TEST(JobRendezvous, ARankWithAProblemWhosePeerNeverComesFailsWithinTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROWS_WITH(JobRendezvous(rank_env(0, 2, testing::free_tcp_port()), {"bad input"}, 2s),
                     "ranks 1 (node_rank 0) never reached the rendezvous");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 7s);
}

}  // namespace
}  // namespace fsdp
