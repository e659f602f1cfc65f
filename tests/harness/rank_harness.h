#pragma once
// The in-process rank fixture: runs a test body on N ranks, one thread each,
// every rank with its own Gloo fsdp::ProcessGroup over one shared FileStore.
//
//   fsdp::testing::run_ranks(4, [](fsdp::testing::RankContext& ctx) {
//     auto t = at::full({2}, ctx.rank, at::kFloat);
//     ctx.group->all_reduce(t, fsdp::ReduceOp::kSum)->wait();
//   });
//
// A rank that throws fails the test with "rank R: <what()>". A rank that runs
// past `timeout` is reported and the whole process exits with a failing code,
// so a hung collective never hangs the test binary (ctest runs each gtest case
// as its own process).
//
// Threads: ATen's intra-op thread count is process-wide, not per rank, so
// tests run with OMP_NUM_THREADS=1 (set by tests/CMakeLists.txt for ctest).

#include <chrono>
#include <functional>
#include <string>

#include "fsdp/comm/process_group.h"

namespace c10d {
class Store;
}

namespace fsdp::testing {

struct RankContext {
  int rank;
  int world_size;
  fsdp::ProcessGroupPtr group;  // Gloo, named "world", timeout = comm_timeout (and host_staging)
  // The store `group` was made over, shared by all ranks; for tests that build
  // more groups (give them names other than "world").
  c10::intrusive_ptr<c10d::Store> store;
};

struct RankRunOptions {
  // The whole body on every rank must finish within this, or the process dies.
  std::chrono::milliseconds timeout{120000};
  // The group's collective timeout (GroupOptions::timeout).
  std::chrono::milliseconds comm_timeout{30000};
  // GroupOptions::host_staging: the groups also take CUDA tensors, so the
  // ranks can share one GPU (the multi-rank lane of tests/gpu/).
  bool host_staging = false;
};

void run_ranks(int world_size, const std::function<void(RankContext&)>& fn,
               RankRunOptions options = {});

// Limits for tests whose failure mode is a hang: they fail within a minute,
// not after the default two.
inline RankRunOptions quick() {
  RankRunOptions o;
  o.timeout = std::chrono::milliseconds(60000);
  o.comm_timeout = std::chrono::milliseconds(20000);
  return o;
}

// "rank R", for failure messages.
inline std::string rank_str(const RankContext& ctx) { return "rank " + std::to_string(ctx.rank); }

}  // namespace fsdp::testing
