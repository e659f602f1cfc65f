#pragma once
// The rank fixture with one process per rank, for what threads cannot do:
// LibTorch's autograd engine runs the backward of every CUDA graph on one
// worker thread per device, shared by the whole process, so rank threads
// of one process cannot run CUDA backward side by side (the first rank to
// wait for a collective inside backward holds that thread while its peer's
// backward waits behind it). run_ranks (rank_harness.h) stays the fixture
// for everything else.
//
//   run_rank_processes(2, [&](RankContext& ctx) { ... }, options);
//
// The test binary runs itself once per rank, filtered to the calling test,
// with the torchrun variables set (harness/multiprocess.h). In each rank's
// process the test body runs up to this call (what it computed before is
// computed again, from the same seeds), then `body` as that rank, over a
// group from init_process_group_from_env with options.comm_timeout and
// options.host_staging (ctx.store is null); a failure fails that process.
// The calling test fails with the output of every rank that failed. One
// call per test: the ranks' processes return from it and end the test.

#include <functional>

#include "harness/rank_harness.h"

namespace fsdp::testing {

void run_rank_processes(int world_size, const std::function<void(RankContext&)>& body,
                        RankRunOptions options = {});

}  // namespace fsdp::testing
