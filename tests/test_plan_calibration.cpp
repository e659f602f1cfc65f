// What fsdp-plan computes from measurements, against cases computed by
// hand: the compute model fitted to calibrate's GPT steps, and a validation
// case's median round. Pure arithmetic: no ranks run.

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "case_result.h"
#include "compute_fit.h"

namespace fsdp_plan {
namespace {

TEST(PlanCalibration, ComputeFitRecoversTheModelItWasMeasuredFrom) {
  // Steps of 2 x ideal + 1.5 ms a unit: half the matmul rate, 1.5 ms a unit.
  const std::vector<ComputePoint> points = {
      {"2x48", 1e-3, 3, 6.5e-3}, {"4x96", 4e-3, 5, 15.5e-3}, {"2x192", 8e-3, 3, 20.5e-3}};
  const ComputeFit fit = fit_compute_model(points);
  EXPECT_NEAR(fit.achieved_fraction, 0.5, 1e-12);
  EXPECT_NEAR(fit.unit_overhead_s, 1.5e-3, 1e-15);
  EXPECT_EQ(fit_summary(fit, points), "2x48 1.00, 4x96 1.00, 2x192 1.00");
  // A step measured 25% slower than the model shows as fitted/measured 0.80.
  EXPECT_EQ(fit_summary(fit, {{"4x48", 1e-3, 5, 1.25 * 9.5e-3}}), "4x48 0.80");
}

TEST(PlanCalibration, ComputeFitNeverBeatsTheMatmulRate) {
  // y = 0.5 x + 2 u fits a = 0.5: faster than the matmul. Clamped to a = 1,
  // c is refitted to y - x = (1.5, 1.0) over u = (1, 1): 1.25.
  const ComputeFit fit = fit_compute_model({{"a", 1, 1, 2.5}, {"b", 2, 1, 3}});
  EXPECT_DOUBLE_EQ(fit.achieved_fraction, 1);
  EXPECT_DOUBLE_EQ(fit.unit_overhead_s, 1.25);
  // Steps faster than the matmul alone leave no cost per unit, not a negative one.
  const ComputeFit faster = fit_compute_model({{"a", 2, 1, 1}, {"b", 4, 3, 2}});
  EXPECT_DOUBLE_EQ(faster.achieved_fraction, 1);
  EXPECT_DOUBLE_EQ(faster.unit_overhead_s, 0);
}

TEST(PlanValidationRounds, RowIsTheMedianRoundWithTheLargestPeaks) {
  // Step ratios 1.5, 0.8 and 1.1: the row is the third round, whole.
  const auto round = [](double planned_ms, double measured_ms, double tensors, double resident) {
    CaseResult r;
    r.name = "L2 W64 x2 full";
    r.planned_tensor_bytes = 100, r.measured_tensor_bytes = tensors;
    r.planned_resident_bytes = 1000, r.measured_resident_bytes = resident;
    r.planned_step_s = planned_ms / 1e3, r.measured_step_s = measured_ms / 1e3;
    return r;
  };
  const CaseResult row = median_round({round(15, 10, 98, 990), round(16, 20, 99, 1010),
                                       round(22, 20, 97, 995)});
  EXPECT_DOUBLE_EQ(row.planned_step_s, 0.022);
  EXPECT_DOUBLE_EQ(row.measured_step_s, 0.020);
  EXPECT_DOUBLE_EQ(row.step_ratio(), 1.1);
  EXPECT_DOUBLE_EQ(row.lowest_round_ratio, 0.8);
  EXPECT_DOUBLE_EQ(row.highest_round_ratio, 1.5);
  EXPECT_DOUBLE_EQ(row.measured_tensor_bytes, 99);  // peaks: the most any round reached
  EXPECT_DOUBLE_EQ(row.measured_resident_bytes, 1010);
  EXPECT_EQ(row.name, "L2 W64 x2 full");
  // One round is its own row; no round is an error, not an empty row.
  EXPECT_DOUBLE_EQ(median_round({round(15, 10, 98, 990)}).step_ratio(), 1.5);
  EXPECT_THROW(median_round({}), std::invalid_argument);
}

}  // namespace
}  // namespace fsdp_plan
