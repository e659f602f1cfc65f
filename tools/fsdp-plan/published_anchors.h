#pragma once
// The published memory figures fsdp-plan is checked against
// (`fsdp-plan anchors`, docs/planner.md "Anchors"):
//  - the ZeRO paper's model-state memory per device (Rajbhandari et al.,
//    arXiv 1910.02054, section 3 and figure 1): with mixed-precision Adam,
//    2 bytes of fp16 parameters, 2 of fp16 gradients and K = 12 of optimizer
//    state (fp32 parameters, momentum, variance) per parameter, so 16 Psi
//    unsharded; stage 1 shards the optimizer state (4 Psi + K Psi / Nd),
//    stage 2 the gradients too (2 Psi + (2 + K) Psi / Nd), stage 3 all
//    ((4 + K) Psi / Nd). Its example: 7.5 B parameters on 64 devices take
//    120, 31.4, 16.6 and 1.9 GB.
//  - DeepSpeed's estimate_zero3_model_states_mem_needs, from the formula its
//    documentation gives ("Memory Requirements", deepspeed.readthedocs.io):
//    per GPU 4 L + 18 P / G without offload, 4 L + 2 P / G with the optimizer
//    offloaded, 4 L with parameters offloaded too (P parameters, L those of
//    the largest layer, G GPUs in all); per node's CPU 4 L g f or 4 P g f
//    (zero_init on or off), 16 P f / N or P max(4 g, 16 / N) f (optimizer
//    offload), 18 P f / N or P max(4 g, 18 / N) f (both), with g GPUs per
//    node, N nodes and a buffer factor f = 1.5.

#include <string>

namespace fsdp_plan {

// ZeRO paper: model-state bytes per device at `stage` (0-3).
double zero_paper_bytes(int stage, double params, double devices, double k = 12);

struct DeepSpeedZero3Estimate {
  double gpu_bytes = 0;  // per GPU
  double cpu_bytes = 0;  // per node
};

DeepSpeedZero3Estimate deepspeed_zero3_estimate(double params, double largest_layer_params,
                                                int gpus_per_node, int nodes, bool offload_optimizer,
                                                bool offload_params, bool zero_init,
                                                double buffer_factor = 1.5);

// The anchors table: published figure, the formula above, and fsdp-plan's
// own model-state bytes for the matching setting.
std::string format_anchors();

}  // namespace fsdp_plan
