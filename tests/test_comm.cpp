// fsdp::ProcessGroup on Gloo: results of every collective against values
// computed by hand, at world sizes 1-4 and in the dtypes FSDP moves; async
// use; sub-groups and the hybrid mesh; the error texts; and that a rank that
// never joins a collective makes its peers fail instead of hang.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include "fsdp/file_tree.h"
#include "harness/assertions.h"
#include "harness/rank_harness.h"

namespace fsdp {
namespace {

using testing::RankContext;
using testing::run_ranks;

// Small integers, exact in every dtype under test (bfloat16 included) and
// distinct per rank and position, so a misplaced chunk is always caught.
at::Tensor rank_values(int rank, int64_t numel, at::ScalarType dtype) {
  return (at::arange(numel, at::kLong) % 8 + 10 * rank).to(dtype);
}

struct Case {
  int world_size;
  at::ScalarType dtype;
  int64_t shard_numel;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return "ws" + std::to_string(info.param.world_size) + "_" +
         std::string(c10::toString(info.param.dtype)) + "_k" +
         std::to_string(info.param.shard_numel);
}

// ctest lists each case with its parameter: print it as the case name.
void PrintTo(const Case& c, std::ostream* os) { *os << case_name({c, 0}); }

class CollectiveTest : public ::testing::TestWithParam<Case> {};

TEST_P(CollectiveTest, AllGatherPlacesEachRanksInputAtItsOffset) {
  const Case c = GetParam();
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const auto input = rank_values(ctx.rank, c.shard_numel, c.dtype);
    const auto output = at::full({ctx.world_size * c.shard_numel}, -1, c.dtype);
    ctx.group->all_gather(output, input)->wait();
    for (int r = 0; r < ctx.world_size; ++r) {
      EXPECT_TRUE(output.narrow(0, r * c.shard_numel, c.shard_numel)
                      .equal(rank_values(r, c.shard_numel, c.dtype)))
          << "chunk of rank " << r << " seen on rank " << ctx.rank;
    }
    const auto counters = ctx.group->counters();
    EXPECT_EQ(counters.all_gather, 1);
    EXPECT_EQ(counters.bytes_sent, (ctx.world_size - 1) * input.nbytes());
  });
}

TEST_P(CollectiveTest, ReduceScatterSumsEachChunkAcrossRanks) {
  const Case c = GetParam();
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const int64_t total = ctx.world_size * c.shard_numel;
    auto expected = at::zeros({total}, at::kLong);
    for (int r = 0; r < ctx.world_size; ++r) expected += rank_values(r, total, at::kLong);
    const auto input = rank_values(ctx.rank, total, c.dtype);
    const auto output = at::full({c.shard_numel}, -1, c.dtype);
    ctx.group->reduce_scatter(output, input, ReduceOp::kSum)->wait();
    EXPECT_TRUE(output.equal(
        expected.narrow(0, ctx.rank * c.shard_numel, c.shard_numel).to(c.dtype)))
        << "rank " << ctx.rank << " got " << output;
    const auto counters = ctx.group->counters();
    EXPECT_EQ(counters.reduce_scatter, 1);
    EXPECT_EQ(counters.bytes_sent, (ctx.world_size - 1) * output.nbytes());
  });
}

TEST_P(CollectiveTest, ReduceScatterMaxMinAndAvg) {
  const Case c = GetParam();
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const int64_t total = ctx.world_size * c.shard_numel;
    const auto slice = [&](const at::Tensor& t) {
      return t.narrow(0, ctx.rank * c.shard_numel, c.shard_numel);
    };
    const auto out = at::empty({c.shard_numel}, c.dtype);
    ctx.group->reduce_scatter(out, rank_values(ctx.rank, total, c.dtype), ReduceOp::kMax)->wait();
    EXPECT_TRUE(out.equal(slice(rank_values(ctx.world_size - 1, total, c.dtype))));
    ctx.group->reduce_scatter(out, rank_values(ctx.rank, total, c.dtype), ReduceOp::kMin)->wait();
    EXPECT_TRUE(out.equal(slice(rank_values(0, total, c.dtype))));
    if (at::isFloatingType(c.dtype)) {
      // Mean of (i % 8 + 10 r) over r is i % 8 + 5 (n - 1): exact in bfloat16.
      ctx.group->reduce_scatter(out, rank_values(ctx.rank, total, c.dtype), ReduceOp::kAvg)
          ->wait();
      const auto expected = (at::arange(total, at::kDouble).fmod(8) + 5.0 * (ctx.world_size - 1));
      EXPECT_TRUE(out.equal(slice(expected).to(c.dtype))) << out;
    }
  });
}

TEST_P(CollectiveTest, AllReduceAndBroadcast) {
  const Case c = GetParam();
  run_ranks(c.world_size, [&](RankContext& ctx) {
    const int64_t numel = ctx.world_size * c.shard_numel + 1;  // not a multiple of the size
    auto expected = at::zeros({numel}, at::kLong);
    for (int r = 0; r < ctx.world_size; ++r) expected += rank_values(r, numel, at::kLong);
    auto t = rank_values(ctx.rank, numel, c.dtype);
    ctx.group->all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_TRUE(t.equal(expected.to(c.dtype))) << t;
    t = rank_values(ctx.rank, numel, c.dtype);
    ctx.group->all_reduce(t, ReduceOp::kMax)->wait();
    EXPECT_TRUE(t.equal(rank_values(ctx.world_size - 1, numel, c.dtype)));

    const int root = ctx.world_size - 1;
    auto b = rank_values(ctx.rank, numel, c.dtype);
    ctx.group->broadcast(b, root)->wait();
    EXPECT_TRUE(b.equal(rank_values(root, numel, c.dtype)));
  });
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int ws : {1, 2, 3, 4}) {
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kDouble, at::kLong}) {
      for (int64_t k : {1, 5}) cases.push_back({ws, dtype, k});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Gloo, CollectiveTest, ::testing::ValuesIn(all_cases()), case_name);

// Small segments force the pipelined ring through uneven segment splits.
TEST(Comm, SegmentedRingsMatchUnsegmented) {
  run_ranks(3, [](RankContext& ctx) {
    GroupOptions options;
    options.name = "segmented";
    options.timeout = std::chrono::seconds(30);
    options.ring_segment_bytes = 24;  // 6 floats; a 37-float chunk becomes 7 segments
    auto group = make_process_group(ctx.store, ctx.rank, ctx.world_size, options);
    const int64_t k = 37;
    const auto input = rank_values(ctx.rank, 3 * k, at::kFloat);
    const auto reduced = at::empty({k}, at::kFloat);
    group->reduce_scatter(reduced, input.clone(), ReduceOp::kSum)->wait();
    const auto reference = input.clone();
    ctx.group->all_reduce(reference, ReduceOp::kSum)->wait();
    EXPECT_TRUE(reduced.equal(reference.narrow(0, ctx.rank * k, k)));

    const auto gathered = at::empty({3 * k}, at::kFloat);
    group->all_gather(gathered, reduced)->wait();
    EXPECT_TRUE(gathered.equal(reference));
  });
}

TEST(Comm, AsyncCollectivesCompleteInIssueOrderAndCanBeWaitedLater) {
  run_ranks(3, [](RankContext& ctx) {
    const int n = ctx.world_size;
    const int64_t k = 1000;
    std::vector<at::Tensor> gathered, scattered, reduced;
    std::vector<WorkPtr> works;
    for (int i = 0; i < 4; ++i) {
      gathered.push_back(at::empty({n * k}, at::kFloat));
      works.push_back(ctx.group->all_gather(gathered.back(), at::full({k}, ctx.rank + i, at::kFloat)));
      scattered.push_back(at::empty({k}, at::kFloat));
      works.push_back(ctx.group->reduce_scatter(scattered.back(), at::full({n * k}, i, at::kFloat),
                                                ReduceOp::kSum));
      reduced.push_back(at::full({k}, 1.0f, at::kFloat));
      works.push_back(ctx.group->all_reduce(reduced.back(), ReduceOp::kAvg));
    }
    works.push_back(ctx.group->barrier());
    // Wait in reverse: each handle is independent of the order of waits.
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    for (auto& w : works) EXPECT_TRUE(w->is_completed());
    for (int i = 0; i < 4; ++i) {
      for (int r = 0; r < n; ++r) {
        EXPECT_TRUE(gathered[i].narrow(0, r * k, k).eq(r + i).all().item<bool>());
      }
      EXPECT_TRUE(scattered[i].eq(static_cast<float>(i * n)).all().item<bool>());
      EXPECT_TRUE(reduced[i].eq(1.0f).all().item<bool>());
    }
    const auto counters = ctx.group->counters();
    EXPECT_EQ(counters.all_gather, 4);
    EXPECT_EQ(counters.reduce_scatter, 4);
    EXPECT_EQ(counters.all_reduce, 4);
    EXPECT_EQ(counters.barrier, 1);
  });
}

TEST(Comm, InputMayAliasItsSlotOfTheOutput) {
  run_ranks(2, [](RankContext& ctx) {
    const auto output = at::zeros({8}, at::kFloat);
    auto mine = output.narrow(0, ctx.rank * 4, 4);
    mine.fill_(ctx.rank + 1);
    ctx.group->all_gather(output, mine)->wait();
    EXPECT_TRUE(output.equal(at::cat({at::full({4}, 1.0f), at::full({4}, 2.0f)})));
  });
}

TEST(Comm, SubgroupContainsOnlyItsMembers) {
  run_ranks(4, [](RankContext& ctx) {
    auto odd = ctx.group->new_subgroup({1, 3}, "odd");
    auto all = ctx.group->new_subgroup({0, 1, 2, 3}, "all");
    ASSERT_TRUE(all);
    EXPECT_EQ(all->rank(), ctx.rank);
    if (ctx.rank % 2 == 0) {
      EXPECT_EQ(odd, nullptr);
    } else {
      ASSERT_TRUE(odd);
      EXPECT_EQ(odd->size(), 2);
      EXPECT_EQ(odd->rank(), ctx.rank / 2);
      EXPECT_EQ(odd->global_ranks(), (std::vector<int>{1, 3}));
      EXPECT_EQ(odd->options().name, "odd");
      auto t = at::full({3}, ctx.rank, at::kLong);
      odd->all_reduce(t, ReduceOp::kSum)->wait();
      EXPECT_TRUE(t.eq(4).all().item<bool>());
    }
    auto t = at::full({2}, ctx.rank, at::kLong);
    all->all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_TRUE(t.eq(6).all().item<bool>());
  });
}

TEST(Comm, HybridMeshTwoByTwo) {
  run_ranks(4, [](RankContext& ctx) {
    const DeviceMesh mesh = make_hybrid_mesh(ctx.group, 2);
    const int replica = ctx.rank / 2;
    const int shard_index = ctx.rank % 2;
    EXPECT_EQ(mesh.world, ctx.group);
    EXPECT_EQ(mesh.shard->rank(), shard_index);
    EXPECT_EQ(mesh.shard->global_ranks(), (std::vector<int>{2 * replica, 2 * replica + 1}));
    EXPECT_EQ(mesh.shard->options().name, "shard[" + std::to_string(replica) + "]");
    EXPECT_EQ(mesh.replicate->rank(), replica);
    EXPECT_EQ(mesh.replicate->global_ranks(), (std::vector<int>{shard_index, shard_index + 2}));

    // FSDP's hybrid step: reduce-scatter in the shard group, then all-reduce
    // the shard across replicas. Every rank contributes its global rank.
    const auto grads = at::full({4}, static_cast<float>(ctx.rank), at::kFloat);
    const auto shard = at::empty({2}, at::kFloat);
    mesh.shard->reduce_scatter(shard, grads, ReduceOp::kSum)->wait();
    EXPECT_TRUE(shard.eq(static_cast<float>(4 * replica + 1)).all().item<bool>());
    mesh.replicate->all_reduce(shard, ReduceOp::kSum)->wait();
    EXPECT_TRUE(shard.eq(6.0f).all().item<bool>());  // 0 + 1 + 2 + 3
  });
}

// [Note: a group is ready only when every member has joined] Without the
// barrier that ends group creation, a rank that drops its mesh at once
// closed sockets a slower peer was still connecting (about 1 run in 10).
TEST(Comm, SubgroupsDroppedRightAfterCreationNeverBreakASlowerPeer) {
  run_ranks(4, [](RankContext& ctx) {
    for (int round = 0; round < 20; ++round) {
      const DeviceMesh mesh = make_hybrid_mesh(ctx.group, 2);
      EXPECT_EQ(mesh.replicate->size(), 2);
    }
  });
}

TEST(Comm, ControlPlaneHelpers) {
  run_ranks(3, [](RankContext& ctx) {
    const std::string mine = std::string(ctx.rank * 2, 'x') + "r" + std::to_string(ctx.rank);
    const auto strings = all_gather_strings(*ctx.group, mine);
    EXPECT_EQ(strings, (std::vector<std::string>{"r0", "xxr1", "xxxxr2"}));
    EXPECT_EQ(all_gather_int64(*ctx.group, 100 + ctx.rank), (std::vector<int64_t>{100, 101, 102}));
  });
}

TEST(Comm, Names) {
  EXPECT_STREQ(to_string(ReduceOp::kAvg), "avg");
  EXPECT_STREQ(to_string(CommBackend::kGloo), "gloo");
  EXPECT_STREQ(to_string(CommBackend::kNccl), "nccl");
}

TEST(CommErrors, ArgumentChecksNameTheValuesAndTheFix) {
  run_ranks(2, [](RankContext& ctx) {
    auto& g = *ctx.group;
    const auto f3 = at::zeros({3}, at::kFloat);
    EXPECT_THROWS_WITH(g.all_gather(at::zeros({7}, at::kFloat), f3),
                       "all_gather on group 'world' (rank " + std::to_string(ctx.rank) +
                           " of 2): output has 7 elements but must have size() * "
                           "input.numel() = 2 * 3 = 6");
    EXPECT_THROWS_WITH(g.all_gather(at::zeros({6}, at::kDouble), f3),
                       "output dtype Double does not match input dtype Float");
    EXPECT_THROWS_WITH(g.reduce_scatter(f3, at::zeros({7}, at::kFloat), ReduceOp::kSum),
                       "input has 7 elements but must have size() * output.numel() = 2 * 3 = 6");
    EXPECT_THROWS_WITH(g.reduce_scatter(at::zeros({2}, at::kLong), at::zeros({4}, at::kLong),
                                        ReduceOp::kAvg),
                       "ReduceOp::kAvg needs a floating-point dtype, got Long");
    EXPECT_THROWS_WITH(g.all_reduce(at::zeros({4, 4}, at::kFloat).t(), ReduceOp::kSum),
                       "tensor must be contiguous");
    EXPECT_THROWS_WITH(g.all_reduce(at::empty({4}, at::TensorOptions().device(at::kMeta)),
                                    ReduceOp::kSum),
                       "is on meta but the Gloo backend works on CPU tensors");
    EXPECT_THROWS_WITH(g.broadcast(f3, 2), "root 2 is out of range; it is a group rank in [0, 2)");
    EXPECT_THROWS_WITH(g.broadcast(f3, -1), "root -1 is out of range");
    EXPECT_THROWS_WITH(g.new_subgroup({0, 2}, "bad"), "rank 2 is out of range");
    EXPECT_THROWS_WITH(g.new_subgroup({1, 0}, "bad"), "strictly ascending");
    EXPECT_THROWS_WITH(g.new_subgroup({1, 1}, "bad"), "strictly ascending");
    EXPECT_THROWS_WITH(g.new_subgroup({}, "bad"), "the rank list is empty");
    EXPECT_THROWS_WITH(make_hybrid_mesh(ctx.group, 3),
                       "shard_size 3 does not divide the world size 2");
    // Nothing above reached the wire; the group still works.
    auto t = at::ones({2}, at::kFloat);
    g.all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_TRUE(t.eq(2.0f).all().item<bool>());
  });
}

// make_single_process_group: this process alone, no store or launcher to set
// up. Every collective is the identity (kAvg over one rank included), and the
// options given are the group's.
TEST(SingleProcessGroup, CollectivesAreTheIdentityAndOptionsAreKept) {
  GroupOptions options;
  options.name = "alone";
  options.timeout = std::chrono::seconds(7);
  ProcessGroupPtr group = make_single_process_group(options);
  ASSERT_TRUE(group);
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->options().name, "alone");
  EXPECT_EQ(group->options().timeout, std::chrono::milliseconds(7000));
  EXPECT_EQ(group->global_ranks(), std::vector<int>{0});

  const at::Tensor values = rank_values(0, 6, at::kFloat);
  at::Tensor gathered = at::empty({6}, at::kFloat);
  group->all_gather(gathered, values)->wait();
  EXPECT_TRUE(at::equal(gathered, values));
  at::Tensor scattered = at::empty({6}, at::kFloat);
  group->reduce_scatter(scattered, values.clone(), ReduceOp::kSum)->wait();
  EXPECT_TRUE(at::equal(scattered, values));
  at::Tensor averaged = values.clone();
  group->all_reduce(averaged, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(at::equal(averaged, values));
  at::Tensor broadcast = values.clone();
  group->broadcast(broadcast, 0)->wait();
  EXPECT_TRUE(at::equal(broadcast, values));
  group->barrier()->wait();
  EXPECT_EQ(all_gather_strings(*group, "only"), std::vector<std::string>{"only"});
  EXPECT_EQ(group->counters().all_gather, 3);  // ours, and all_gather_strings' two
}

// Two single-process groups are independent: each has its own store, so the
// same name in both is no clash.
TEST(SingleProcessGroup, GroupsOfTheSameNameAreIndependent) {
  ProcessGroupPtr a = make_single_process_group();
  ProcessGroupPtr b = make_single_process_group();
  at::Tensor t = at::ones({3}, at::kFloat);
  a->all_reduce(t, ReduceOp::kSum)->wait();
  b->all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_TRUE(t.eq(1.0f).all().item<bool>());
  EXPECT_EQ(a->counters().all_reduce, 1);
  EXPECT_EQ(b->counters().all_reduce, 1);
}

#if !defined(FSDP_WITH_NCCL)
TEST(CommErrors, NcclWithoutCudaBuildSaysHowToGetIt) {
  run_ranks(1, [](RankContext& ctx) {
    GroupOptions options;
    options.backend = CommBackend::kNccl;
    options.name = "gpu";
    EXPECT_THROWS_WITH(make_process_group(ctx.store, 0, 1, options),
                       "asks for CommBackend::kNccl, but this libfsdp was built against a "
                       "LibTorch without CUDA");
  });
}
#endif

// The only timing check allowed in tests: an upper bound on a failure path,
// to prove that a missing peer makes the collective fail instead of hang.
TEST(CommFaults, RankThatSkipsACollectiveFailsItsPeersWithinTheTimeout) {
  const auto timeout = std::chrono::seconds(2);
  std::atomic<bool> peers_done{false};
  testing::RankRunOptions options;
  options.comm_timeout = timeout;
  run_ranks(3, [&](RankContext& ctx) {
    if (ctx.rank == 0) {
      // Skips the collective but stays alive, so the others must time out.
      while (!peers_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto out = at::empty({4}, at::kFloat);
    auto work = ctx.group->reduce_scatter(out, at::ones({12}, at::kFloat), ReduceOp::kSum);
    EXPECT_THROWS_WITH(work->wait(), "fsdp: reduce_scatter on group 'world' (rank " +
                                         std::to_string(ctx.rank) + " of 3) failed: ");
    // The error names the peer it waited for: rank 1 hears nothing from rank
    // 0; rank 2 hears rank 1's first message, then waits for what rank 1
    // never got from rank 0.
    EXPECT_THROWS_WITH(work->wait(), "failed: receiving from rank " +
                                         std::to_string(ctx.rank - 1) + " (timeout 2000 ms)");
    EXPECT_LT(std::chrono::steady_clock::now() - start, timeout + std::chrono::seconds(5));
    // The failure is sticky: later collectives fail at once with the first error.
    auto t = at::ones({4}, at::kFloat);
    EXPECT_THROWS_WITH(ctx.group->all_reduce(t, ReduceOp::kSum)->wait(),
                       "broken by an earlier failure: fsdp: reduce_scatter on group 'world'");
    EXPECT_THROWS_WITH(work->wait(), "reduce_scatter");  // rethrown on every wait
    static std::atomic<int> finished{0};
    if (++finished == 2) peers_done = true;
  }, options);
}

// Issue #13, point 3: the timeout's default comes from FSDP_COMM_TIMEOUT
// (fsdp-run --timeout sets it), and a bad value is named.
TEST(CommTimeout, DefaultComesFromTheEnvironmentAndBadValuesAreNamed) {
  unsetenv("FSDP_COMM_TIMEOUT");
  EXPECT_EQ(GroupOptions().timeout, std::chrono::minutes(5));
  setenv("FSDP_COMM_TIMEOUT", "2.5", 1);
  EXPECT_EQ(GroupOptions().timeout, std::chrono::milliseconds(2500));
  for (const char* bad : {"soon", "0", "-3", "1e9", "5s"}) {
    setenv("FSDP_COMM_TIMEOUT", bad, 1);
    EXPECT_THROWS_WITH(GroupOptions(), std::string("fsdp: FSDP_COMM_TIMEOUT='") + bad +
                                           "' is not a number of seconds in (0, 86400]");
  }
  unsetenv("FSDP_COMM_TIMEOUT");
}

// A peer that never creates the group: creation fails within the timeout,
// naming it.
TEST(CommFaults, PeerThatNeverJoinsFailsGroupCreation) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fsdp-nojoin-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto store = c10::make_intrusive<c10d::FileStore>((dir / "store").string(), 1);
  store->setTimeout(std::chrono::seconds(2));
  GroupOptions options;
  options.timeout = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    make_process_group(store, 0, 2, options);
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("fsdp: creating Gloo group 'world' (rank 0 of 2) failed"),
            std::string::npos)
      << message;
  // Issue #35: the error names the member it waited for, not just the
  // store's "Socket Timeout" or "Wait timeout".
  EXPECT_NE(message.find("Members that never began creating it: 1."), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(7));
  store.reset();
  fsdp::remove_tree_or_throw(dir);
}

}  // namespace
}  // namespace fsdp
