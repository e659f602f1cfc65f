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

  // What a rank's process holds at a tensor peak of `tensor_bytes`.
  double resident_bytes(double tensor_bytes) const {
    return runtime_bytes + tensor_bytes * (1 + allocator_retention);
  }
  int ranks_per_node = 8;
  Link intra_node;
  Link inter_node;

  double achieved_flops(bool bf16) const {
    return achieved_fraction * (bf16 ? peak_flops_bf16 : peak_flops_fp32);
  }
};

const std::vector<HardwareProfile>& shipped_profiles();
// A shipped profile by name, or a JSON file by path; throws naming the value
// and the shipped names.
HardwareProfile load_profile(const std::string& name_or_path);
void save_profile(const HardwareProfile& profile, const std::string& path);
std::string profile_to_json(const HardwareProfile& profile);

}  // namespace fsdp_plan
