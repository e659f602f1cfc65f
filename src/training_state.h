#pragma once
// Where a unit is in the training step. Every hook checks it, so misuse
// (forward during backward, a unit run outside its root, ...) becomes a clear
// error instead of corrupted gradients or a hang.

namespace fsdp::detail {

enum class TrainingState {
  kIdle,          // between steps, or forward done and waiting for backward
  kForward,       // inside the unit's forward
  kPreBackward,   // backward reached the unit; parameters gathered
  kPostBackward,  // the unit's backward is done; gradients being reduced
  kSummonFullParams,  // inside fsdp::SummonFullParams: full parameters exposed
};

inline const char* to_string(TrainingState state) {
  switch (state) {
    case TrainingState::kIdle: return "IDLE";
    case TrainingState::kForward: return "FORWARD";
    case TrainingState::kPreBackward: return "PRE_BACKWARD";
    case TrainingState::kPostBackward: return "POST_BACKWARD";
    case TrainingState::kSummonFullParams: return "SUMMON_FULL_PARAMS";
  }
  return "?";
}

}  // namespace fsdp::detail
