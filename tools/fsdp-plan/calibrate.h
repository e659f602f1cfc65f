#pragma once
// `fsdp-plan calibrate`: this machine's profile, measured.
//
// Run on its own, it starts itself again under fsdp-run (found next to this
// program) with --nproc-per-node ranks, because a link is measured between
// processes, as training uses it. Each rank then measures, with the threads
// a rank gets (cores / ranks, or OMP_NUM_THREADS):
//  - matmul throughput, fp32 and bf16 (1024 x 1024 products);
//  - memory bandwidth (a 128 MiB copy);
//  - a GPT's training steps at four sizes, fp32 and bf16, fitted to the
//    planner's compute model ([Note: compute calibrated on the GPT]);
//  - the link: all-gathers of 16 KiB and 32 MiB, fitted to the ring's
//    (p - 1) alpha + (p - 1)/p n beta (not with one rank);
//  - the runtime's resident memory (VmRSS once LibTorch, its thread pools and
//    the process group are up), and what the allocator keeps beyond the
//    tensors over a small GPT's training steps.
// All of it `repeats` times; rank 0 writes the profile (the medians over
// ranks and passes). All ranks share one
// machine, so the inter-node link is the measured one too; the profile's
// source says so, and a two-host run or the slow-link testbed replaces it.

#include <string>

namespace fsdp_plan {

struct CalibrateOptions {
  std::string output;
  int nproc_per_node = 2;
  int repeats = 3;  // passes; each timing figure is their median ([Note: repeated calibration])
  double seconds_per_measure = 0.5;
};

// Returns the exit code.
int calibrate(const CalibrateOptions& options, const std::string& self_path);

}  // namespace fsdp_plan
