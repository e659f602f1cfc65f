#pragma once
// What calibrate fits its compute and synchronization figures on; also what
// median_profile compares calibration passes by.

#include <cstdint>
#include <vector>

#include "model_spec.h"

namespace fsdp_plan {

// The GPT sizes calibrate fits its compute and synchronization figures on
// (two depths x three widths, none of them a size `validate` checks), and the
// sequences per rank each step takes, as validate's cases at two ranks.
inline const std::vector<GptSizes>& calibration_gpt_sizes() {
  static const std::vector<GptSizes> sizes = {
      {2, 48, 2, 64, 256}, {4, 48, 2, 64, 256},  {2, 96, 2, 64, 256},
      {4, 96, 2, 64, 256}, {2, 192, 4, 64, 256}, {4, 192, 4, 64, 256}};
  return sizes;
}
constexpr int64_t kCalibrationBatch = 4;

}  // namespace fsdp_plan
