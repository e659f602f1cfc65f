#pragma once
// The planner's compute model fitted to measured steps: a step's compute
// takes flops / (achieved fraction x matmul rate) + units x a cost per unit
// ([Note: compute calibrated on the GPT] in calibrate.cpp). Pure arithmetic,
// apart from the measurements calibrate feeds it.

#include <string>
#include <vector>

namespace fsdp_plan {

// One measured GPT size: its compute at the full matmul rate (ideal_s), its
// FSDP units, and the measured step less the planned optimizer step.
struct ComputePoint {
  std::string name;  // e.g. "2x96", for the fit's summary
  double ideal_s = 0;
  double units = 0;
  double measured_s = 0;
};

struct ComputeFit {
  double achieved_fraction = 1;
  double unit_overhead_s = 0;

  double fitted_s(const ComputePoint& p) const {
    return p.ideal_s / achieved_fraction + unit_overhead_s * p.units;
  }
};

// Least squares over the points: measured = a x ideal + c x units, with
// a = 1 / achieved fraction clamped to [1, 100] (a step cannot beat the
// matmul rate) and c >= 0 refitted for the clamped a.
ComputeFit fit_compute_model(const std::vector<ComputePoint>& points);

// "2x48 1.13, 4x48 1.06, ...": fitted / measured for each point, so a
// calibration shows how well its model describes what it measured.
std::string fit_summary(const ComputeFit& fit, const std::vector<ComputePoint>& points);

}  // namespace fsdp_plan
