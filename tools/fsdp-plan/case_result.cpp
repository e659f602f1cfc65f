#include "case_result.h"

#include <algorithm>
#include <stdexcept>

namespace fsdp_plan {

CaseResult median_round(const std::vector<CaseResult>& rounds) {
  if (rounds.empty()) throw std::invalid_argument("median_round: a case with no rounds");
  std::vector<CaseResult> by_ratio = rounds;
  std::sort(by_ratio.begin(), by_ratio.end(), [](const CaseResult& a, const CaseResult& b) {
    return a.step_ratio() < b.step_ratio();
  });
  CaseResult row = by_ratio[(by_ratio.size() - 1) / 2];  // the lower median of an even count
  row.lowest_round_ratio = by_ratio.front().step_ratio();
  row.highest_round_ratio = by_ratio.back().step_ratio();
  for (const CaseResult& round : rounds) {
    row.measured_tensor_bytes = std::max(row.measured_tensor_bytes, round.measured_tensor_bytes);
    row.measured_resident_bytes = std::max(row.measured_resident_bytes, round.measured_resident_bytes);
  }
  return row;
}

}  // namespace fsdp_plan
