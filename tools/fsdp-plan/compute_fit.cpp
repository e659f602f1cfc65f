#include "compute_fit.h"

#include <fmt/format.h>

#include <algorithm>

namespace fsdp_plan {

ComputeFit fit_compute_model(const std::vector<ComputePoint>& points) {
  // The normal equations of y = a x + c u.
  double sxx = 0, sxu = 0, suu = 0, sxy = 0, suy = 0;
  for (const ComputePoint& p : points) {
    const double x = p.ideal_s, u = p.units, y = p.measured_s;
    sxx += x * x, sxu += x * u, suu += u * u, sxy += x * y, suy += u * y;
  }
  const double det = sxx * suu - sxu * sxu;
  const double a = std::clamp(det > 0 ? (sxy * suu - suy * sxu) / det : 1.0, 1.0, 100.0);
  ComputeFit fit;
  fit.achieved_fraction = 1 / a;
  fit.unit_overhead_s = suu > 0 ? std::max(0.0, (suy - a * sxu) / suu) : 0;  // c for the clamped a
  return fit;
}

std::string fit_summary(const ComputeFit& fit, const std::vector<ComputePoint>& points) {
  std::string text;
  for (const ComputePoint& p : points) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {:.2f}", p.name, fit.fitted_s(p) / p.measured_s);
  }
  return text;
}

}  // namespace fsdp_plan
