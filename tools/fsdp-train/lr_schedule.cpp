#include "lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace fsdp_train {

double LrSchedule::at(int64_t step) const {
  if (warmup > 0 && step <= warmup) {
    return peak * static_cast<double>(step) / static_cast<double>(warmup);
  }
  const int64_t decay_steps = total - warmup;
  if (decay_steps <= 0) return peak;
  const double progress =
      std::clamp(static_cast<double>(step - warmup) / static_cast<double>(decay_steps), 0.0, 1.0);
  return min_lr + 0.5 * (peak - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace fsdp_train
