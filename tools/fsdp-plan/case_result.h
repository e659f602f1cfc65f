#pragma once
// One validation case, planned against measured, and how its rounds
// combine into the row `fsdp-plan validate` prints.

#include <string>
#include <vector>

namespace fsdp_plan {

struct CaseResult {
  std::string name;
  double planned_tensor_bytes = 0, measured_tensor_bytes = 0;
  double planned_resident_bytes = 0, measured_resident_bytes = 0;
  double planned_step_s = 0, measured_step_s = 0;
  // The step ratios of the rounds a row was made from: their spread.
  double lowest_round_ratio = 0, highest_round_ratio = 0;

  double step_ratio() const { return planned_step_s / measured_step_s; }
};

// [Note: a case's median round]
// Each round of `validate` plans a case with that round's own calibration
// and measures it minutes later ([Note: interleaved rounds] in
// validate.cpp), so a round's step ratio compares two measurements made in
// the same state of the machine. The row keeps the round whose step ratio
// is the median (planned and measured step from that round, so the columns
// still divide to the ratio shown); memory figures are peaks, so the row
// takes the largest any round measured, against that round's plan. The row
// also keeps the lowest and highest round's step ratio, to show the spread.
// Throws std::invalid_argument when `rounds` is empty.
CaseResult median_round(const std::vector<CaseResult>& rounds);

}  // namespace fsdp_plan
