#include "median_profile.h"

#include <algorithm>

#include "calibration_sizes.h"
#include "model_spec.h"
#include "time_plan.h"
#include "training_setup.h"

namespace fsdp_plan {
namespace {

// [Note: repeated calibration]
// This machine's speed drifts by tens of percent within seconds: one
// calibration measured alpha at 6 ms where the ones before and after it
// measured 0.27 and 0.43 ms, and every case planned with it was off by 2x.
// So calibrate measures `repeats` times and keeps each timing figure's
// median. Figures fitted together stay together: the matmul rate, the
// achieved fraction and the unit cost come from the pass whose compute
// model plans the median time for the largest fitted GPT (two passes here
// once measured 164 and 194 GFLOP/s at fractions 0.57 and 0.66; medians
// taken apart would pair one pass's rate with another's fraction), and
// alpha and beta from the pass with the median 1 MiB gather. Memory figures
// come from the first pass: later passes find the heap already holding what
// the first freed, and would see less retention.
double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

template <class Key>
const HardwareProfile& median_pass(const std::vector<HardwareProfile>& passes, Key key) {
  std::vector<const HardwareProfile*> sorted;
  for (const auto& p : passes) sorted.push_back(&p);
  std::sort(sorted.begin(), sorted.end(),
            [&](const HardwareProfile* a, const HardwareProfile* b) { return key(*a) < key(*b); });
  return *sorted[sorted.size() / 2];
}

// What a pass's compute model plans for the largest GPT fit_compute runs.
double planned_compute_s(const HardwareProfile& p, bool bf16) {
  TrainingSetup one;
  one.micro_batch = kCalibrationBatch;
  one.bf16 = bf16;
  return plan_time(gpt_model_spec(calibration_gpt_sizes().back()), one, p).compute_s;
}

}  // namespace

HardwareProfile median_profile(const std::vector<HardwareProfile>& passes) {
  HardwareProfile out = passes.front();
  for (double HardwareProfile::*f :
       {&HardwareProfile::memory_bytes_per_s, &HardwareProfile::host_link_bytes_per_s,
        &HardwareProfile::host_memory_bytes_per_s, &HardwareProfile::comm_compute_overlap,
        &HardwareProfile::sync_per_ring_step_s, &HardwareProfile::bf16_sync_per_ring_step_s}) {
    std::vector<double> v;
    for (const auto& p : passes) v.push_back(p.*f);
    out.*f = median(v);
  }
  const HardwareProfile& fp32 = median_pass(passes, [](const HardwareProfile& p) {
    return planned_compute_s(p, false);
  });
  out.peak_flops_fp32 = fp32.peak_flops_fp32;
  out.achieved_fraction = fp32.achieved_fraction;
  out.unit_overhead_s = fp32.unit_overhead_s;
  const HardwareProfile& bf16 = median_pass(passes, [](const HardwareProfile& p) {
    return planned_compute_s(p, true);
  });
  out.peak_flops_bf16 = bf16.peak_flops_bf16;
  out.bf16_achieved_fraction = bf16.bf16_achieved_fraction;
  out.bf16_unit_overhead_s = bf16.bf16_unit_overhead_s;
  out.intra_node = median_pass(passes, [](const HardwareProfile& p) {
                     return p.intra_node.latency_s + (1 << 20) / p.intra_node.bytes_per_s;
                   }).intra_node;
  out.inter_node = out.intra_node;
  return out;
}

}  // namespace fsdp_plan
