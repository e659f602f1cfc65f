#pragma once
// The learning rate at each step: linear warmup from 0 to the peak over
// `warmup` steps, then a cosine decay from the peak to `min_lr` at step
// `total`. Steps count from 1 (the first optimizer step).

#include <cstdint>

namespace fsdp_train {

struct LrSchedule {
  double peak = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup = 0;
  int64_t total = 1;

  // A pure function of the step, so a resumed run needs nothing but the step.
  double at(int64_t step) const;
};

}  // namespace fsdp_train
