#pragma once
// `fsdp-plan validate`: the plan against the real trainer on this machine.
//
// For each case (model size x world size x strategy, and bf16 and offload
// cases) it runs fsdp-train under fsdp-run for a few steps, reads each
// rank's figures from metrics.jsonl (peak tensor bytes per step, counted at
// the allocator; resident high-water mark; step time) and prints them beside
// the plan's, with the ratio, then the worst ratio of each kind.
//
// [Note: validating on one small machine]
// Every rank of a case shares this machine's cores, so a case is planned
// with a profile measured the way it runs: calibrated at the case's own rank
// count. Sharing is not a simple scaling: with four ranks on two cores a
// rank's fixed costs grew about fourfold over two ranks in calibration, not
// twofold, and a collective waits for a peer that is not scheduled. So
// validate calibrates at each rank count its cases use (1, 2 and 4), in
// rounds with the cases ([Note: interleaved rounds] in validate.cpp), and
// plans each case with its own count's profile from the same round. A profile given with
// --profile is instead scaled by its ranks / the case's ranks (rates
// shrink, fixed costs and latency grow), which is cruder. Memory needs
// neither: the counted bytes are what a rank allocates wherever it runs.

#include <string>
#include <vector>

#include "case_result.h"

namespace fsdp_plan {

struct ValidateOptions {
  bool quick = false;         // 4 small cases, 3 steps, one round: what `make test` runs
  int rounds = 5;             // without --quick ([Note: interleaved rounds] in validate.cpp)
  std::string profile;        // "" = calibrate now, at each rank count
  std::string bin_dir;        // where fsdp-run, fsdp-train (and fsdp-plan) are
  std::string data;           // fsdp-train's --data; "" = its default corpus
};

// Runs every case; throws with the trainer's output when a run fails.
std::vector<CaseResult> validate_cases(const ValidateOptions& options);

// The table and the worst ratios; returns the exit code (0 when the
// accounted bytes are within 5% in every case).
int report_validation(const std::vector<CaseResult>& results);

}  // namespace fsdp_plan
