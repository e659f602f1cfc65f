#pragma once
// A machine as fsdp-plan sees it: how fast a rank computes, how much memory
// it has, and the latency and bandwidth of the links inside a node and
// between nodes (the alpha and beta of docs/planner.md).
//
// Profiles ship for common machines (shipped_profiles(), with the public
// figures they come from), and `fsdp-plan calibrate` measures this one and
// writes a JSON file that --profile reads back.

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_plan {

struct Link {
  double latency_s = 0;        // alpha: per message (ring step)
  double bytes_per_s = 0;      // 1/beta: one direction, per rank
};

struct HardwareProfile {
  std::string name;
  std::string source;  // where the figures come from
  // Matmul throughput one rank achieves, per dtype (flop/s), and its peak
  // (for MFU). Shipped GPU profiles assume a fraction of the datasheet peak
  // (`achieved_fraction`); calibrate measures the achieved rate directly.
  double peak_flops_fp32 = 0;
  double peak_flops_bf16 = 0;
  double achieved_fraction = 1;
  double memory_bytes_per_s = 0;  // streaming bandwidth (the optimizer step is bound by it)
  double memory_bytes = 0;       // per rank (a GPU's, or a CPU rank's share)
  double host_memory_bytes = 0;  // per node, for offloaded state
  // Offload: the host-device link (one direction, per rank) and the host
  // memory bandwidth a rank's optimizer step gets on the host.
  double host_link_bytes_per_s = 0;
  double host_memory_bytes_per_s = 0;
  // Resident memory a rank uses before any tensor: the runtime, libraries,
  // allocator slack. calibrate measures it; GPU profiles put the CUDA
  // context here.
  double runtime_bytes = 0;
  // Memory the allocator holds beyond the live tensors at the peak, as a
  // fraction of them: glibc keeps freed heap memory for reuse, fragmented
  // ([Note: resident memory beyond the tensors] in calibrate.cpp).
  double allocator_retention = 0;
  // Fixed time per unit per micro-batch beyond its flops: hooks, operator
  // launches, the optimizer's per-parameter work ([Note: compute calibrated
  // on the GPT] in calibrate.cpp). Shipped profiles leave it at 0.
  double unit_overhead_s = 0;
  // The same two figures for bf16 mixed precision: on a CPU without native
  // bf16 arithmetic the casts and elementwise work cost more than fp32's, so
  // calibrate fits them on bf16 steps. Absent from a file: the fp32 ones.
  double bf16_achieved_fraction = 1;
  double bf16_unit_overhead_s = 0;

  // What a rank's process holds at a tensor peak of `tensor_bytes`.
  double resident_bytes(double tensor_bytes) const {
    return runtime_bytes + tensor_bytes * (1 + allocator_retention);
  }
  int ranks_per_node = 8;
  Link intra_node;
  Link inter_node;
  // How much of a collective runs while the rank computes, 0 to 1: 1 on a
  // GPU (copy engines and NCCL's SMs beside the compute kernels); on CPU
  // ranks, Gloo's threads compete with compute for the same cores, and
  // calibrate measures it ([Note: measured overlap] in calibrate.cpp).
  double comm_compute_overlap = 1;
  // Time each ring step of a collective adds inside a training step beyond
  // the link's alpha-beta cost: waking the threads that run it, their
  // contention with compute for the cores, waiting for the slowest rank.
  // calibrate measures it on sharded GPT steps ([Note: synchronization
  // calibrated on sharded steps] in calibrate.cpp); shipped profiles leave
  // it at 0. The bf16 figure is fitted on bf16 steps; absent from a file,
  // the fp32 one.
  double sync_per_ring_step_s = 0;
  double bf16_sync_per_ring_step_s = 0;

  double achieved_flops(bool bf16) const {
    return achieved_fraction_for(bf16) * (bf16 ? peak_flops_bf16 : peak_flops_fp32);
  }
  double achieved_fraction_for(bool bf16) const { return bf16 ? bf16_achieved_fraction : achieved_fraction; }
  double unit_overhead(bool bf16) const { return bf16 ? bf16_unit_overhead_s : unit_overhead_s; }
  double sync_per_ring_step(bool bf16) const {
    return bf16 ? bf16_sync_per_ring_step_s : sync_per_ring_step_s;
  }
};

const std::vector<HardwareProfile>& shipped_profiles();
// A shipped profile by name, or a JSON file by path; throws naming the value
// and the shipped names.
HardwareProfile load_profile(const std::string& name_or_path);
void save_profile(const HardwareProfile& profile, const std::string& path);
std::string profile_to_json(const HardwareProfile& profile);

}  // namespace fsdp_plan
