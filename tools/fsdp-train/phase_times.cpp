#include "phase_times.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>

namespace fsdp_train {
namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  return values[mid];
}

}  // namespace

const char* step_phase_name(StepPhase phase) {
  switch (phase) {
    case StepPhase::kForward:
      return "forward + loss";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kClip:
      return "clip_grad_norm_";
    case StepPhase::kOptimizer:
      return "optimizer step";
    case StepPhase::kBookkeeping:
      return "loss all-reduce";
  }
  return "?";
}

void PhaseTimer::synchronize_device() const {
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
}

void PhaseTimer::start_step() {
  if (!enabled_) return;
  current_.fill(0);
  synchronize_device();
  last_mark_ = Clock::now();
}

void PhaseTimer::end_phase(StepPhase phase) {
  if (!enabled_) return;
  synchronize_device();  // See [Note: timing phases by synchronizing]
  const auto now = Clock::now();
  current_[static_cast<size_t>(phase)] += std::chrono::duration<double>(now - last_mark_).count();
  last_mark_ = now;
}

void PhaseTimer::finish_step() {
  if (enabled_) steps_.push_back(current_);
}

std::string PhaseTimer::summary(size_t skip) const {
  if (steps_.size() <= skip) skip = 0;
  std::vector<double> totals;
  for (size_t s = skip; s < steps_.size(); ++s) {
    double total = 0;
    for (double t : steps_[s]) total += t;
    totals.push_back(total);
  }
  const double step_ms = 1e3 * median(totals);
  std::string out =
      fmt::format("  phases (median of {} steps, device synchronized after each)\n", totals.size());
  for (size_t p = 0; p < kStepPhaseCount; ++p) {
    std::vector<double> times;
    for (size_t s = skip; s < steps_.size(); ++s) times.push_back(steps_[s][p]);
    const double ms = 1e3 * median(times);
    out +=
        fmt::format("    {:<18} {:9.2f} ms  {:5.1f}%\n", step_phase_name(static_cast<StepPhase>(p)),
                    ms, step_ms > 0 ? 100.0 * ms / step_ms : 0.0);
  }
  out += fmt::format("    {:<18} {:9.2f} ms\n", "step", step_ms);
  return out;
}

}  // namespace fsdp_train
