#include "step_measures.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "fsdp/introspection.h"
#include "rank_figures.h"

namespace fsdp_train {

void StepMeasures::start_step(fsdp::UnitModule& model) {
  fsdp::reset_peak_memory_stats(model);
  tensor_memory_.start_step();
  reset_device_peak_memory(device_);
  if (hook_timer_) hook_timer_->take();
}

void StepMeasures::finish_step(fsdp::ProcessGroup& world, const fsdp::UnitModule& model,
                               StepRecord& record) {
  const int64_t gathered = fsdp::memory_stats(model).peak_gathered_param_bytes;
  const int64_t tensors = tensor_memory_.step_peak_tensor_bytes();
  const DevicePeakMemory device = device_peak_memory(device_);
  run_.gathered = std::max(run_.gathered, gathered);
  run_.tensors = std::max(run_.tensors, tensors);
  run_.device.allocated = std::max(run_.device.allocated, device.allocated);
  run_.device.reserved = std::max(run_.device.reserved, device.reserved);
  const std::vector<fsdp::HookTime> hooks =
      hook_timer_ ? hook_timer_->take() : std::vector<fsdp::HookTime>{};
  const auto hook_us = static_cast<int64_t>(std::llround(1e6 * fsdp::total_seconds(hooks)));

  auto per_rank = gather_per_rank(world, {gathered, tensors, peak_resident_bytes(),
                                          device.allocated, device.reserved, hook_us});
  record.peak_gathered_param_bytes = std::move(per_rank[0]);
  record.peak_tensor_bytes = std::move(per_rank[1]);
  record.peak_resident_bytes = std::move(per_rank[2]);
  if (device_.is_cuda()) {
    record.peak_device_allocated_bytes = std::move(per_rank[3]);
    record.peak_device_reserved_bytes = std::move(per_rank[4]);
  }
  if (hook_timer_) {
    record.hook_us = std::move(per_rank[5]);
    for (const fsdp::HookTime& t : hooks) {
      record.hook_us_by_range.emplace_back(fsdp::hook_name(t), 1e6 * t.seconds);
    }
  }
}

}  // namespace fsdp_train
