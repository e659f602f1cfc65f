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
// Every rank of a case shares this machine's cores, so the profile is scaled
// per case by calibrated ranks / ranks: a rank's matmul rate and memory
// bandwidth shrink, its fixed costs grow, and so do the link's (Gloo over
// loopback is copies and wake-ups on the same cores). The calibrated profile
// is measured once at the start (or read from --profile). Memory needs no
// scaling: the counted bytes are what a rank allocates wherever it runs.

#include <string>
#include <vector>

namespace fsdp_plan {

struct ValidateOptions {
  bool quick = false;         // 4 small cases, 3 steps: what `make test` runs
  std::string profile;        // "" = calibrate now
  std::string bin_dir;        // where fsdp-run, fsdp-train (and fsdp-plan) are
};

struct CaseResult {
  std::string name;
  double planned_tensor_bytes = 0, measured_tensor_bytes = 0;
  double planned_resident_bytes = 0, measured_resident_bytes = 0;
  double planned_step_s = 0, measured_step_s = 0;
};

// Runs every case; throws with the trainer's output when a run fails.
std::vector<CaseResult> validate_cases(const ValidateOptions& options);

// The table and the worst ratios; returns the exit code (0 when the
// accounted bytes are within 5% in every case).
int report_validation(const std::vector<CaseResult>& results);

}  // namespace fsdp_plan
