#pragma once
// --phase-times: where a training step's time goes, phase by phase
// (forward, backward, clipping, the optimizer, the step's bookkeeping).
//
// [Note: timing phases by synchronizing]
// Each phase ends with the device synchronized, so its time is the wall time
// until the device finished that phase's work. That serializes the host's
// kernel launches with the device's work, which a normal step overlaps, so
// the phases add up to a little more than an untimed step: the figures say
// where the time goes, not how long a step takes (metrics.jsonl's ms does).
// On the CPU the work is synchronous and nothing changes.

#include <c10/core/Device.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_train {

// Wall seconds on the steady clock since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

enum class StepPhase { kForward, kBackward, kClip, kOptimizer, kBookkeeping };
constexpr size_t kStepPhaseCount = 5;
const char* step_phase_name(StepPhase phase);

class PhaseTimer {
 public:
  PhaseTimer(c10::Device device, bool enabled) : device_(device), enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  // Starts a step's phases; a no-op unless enabled.
  void start_step();
  // The time since the last mark (start_step or end_phase) belongs to `phase`;
  // phases may repeat within a step (one forward per micro-batch).
  void end_phase(StepPhase phase);
  // Closes the step's record.
  void finish_step();

  // One line per phase: median milliseconds per step over the steps after
  // the first `skip` (warm-up), and the share of the median step.
  std::string summary(size_t skip) const;

 private:
  using Clock = std::chrono::steady_clock;
  void synchronize_device() const;

  const c10::Device device_;
  const bool enabled_;
  Clock::time_point last_mark_;
  std::array<double, kStepPhaseCount> current_{};           // seconds, this step
  std::vector<std::array<double, kStepPhaseCount>> steps_;  // seconds, per finished step
};

}  // namespace fsdp_train
