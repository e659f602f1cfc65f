// Spawned by test_launch_env as real processes (see harness/multiprocess.h):
// joins the job from the launcher's environment and checks one all-gather,
// one reduce-scatter and one string exchange.
//
//   comm_probe             every rank checks the collectives; exits 0 if right
//   comm_probe --die=R     rank R exits right after joining; the others must
//                          fail their all-gather (exit 2) and print the error

#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"

int main(int argc, char** argv) {
  int die_rank = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--die=", 0) == 0) die_rank = std::stoi(arg.substr(6));
  }
  try {
    fsdp::GroupOptions options;
    options.timeout = std::chrono::seconds(20);
    if (die_rank >= 0) options.timeout = std::chrono::seconds(3);
    auto group = fsdp::init_process_group_from_env(options);
    const int rank = group->rank();
    const int n = group->size();
    if (rank == die_rank) std::_Exit(0);

    const int64_t k = 1000;
    const auto gathered = at::empty({n * k}, at::kFloat);
    group->all_gather(gathered, at::full({k}, static_cast<float>(rank), at::kFloat))->wait();
    for (int r = 0; r < n; ++r) {
      if (!gathered.narrow(0, r * k, k).eq(static_cast<float>(r)).all().item<bool>()) {
        std::printf("rank %d: all_gather chunk %d is wrong\n", rank, r);
        return 1;
      }
    }
    const auto shard = at::empty({k}, at::kFloat);
    group->reduce_scatter(shard, at::arange(n * k, at::kFloat), fsdp::ReduceOp::kAvg)->wait();
    if (!shard.equal(at::arange(rank * k, (rank + 1) * k, at::kFloat))) {
      std::printf("rank %d: reduce_scatter result is wrong\n", rank);
      return 1;
    }
    const auto names = fsdp::all_gather_strings(*group, "rank" + std::to_string(rank));
    if (static_cast<int>(names.size()) != n || names[n - 1] != "rank" + std::to_string(n - 1)) {
      std::printf("rank %d: all_gather_strings is wrong\n", rank);
      return 1;
    }
    group->barrier()->wait();
    std::printf("comm_probe rank %d of %d (%s): ok\n", rank, n,
                fsdp::read_launch_env().source.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::printf("comm_probe error: %s\n", e.what());
    return 2;
  }
}
