#include "peak_memory.h"

#include "memory_check.h"

namespace fsdp_train {

StepPeakMemory::StepPeakMemory() : counter_(fsdp::CpuAllocationCounter::install()) {}

void StepPeakMemory::start_step() { counter_.reset_peak(); }

int64_t StepPeakMemory::step_peak_tensor_bytes() const { return counter_.peak_bytes(); }

int64_t peak_resident_bytes() {
  return proc_kib_field_bytes("/proc/self/status", "VmHWM:").value_or(0);
}

}  // namespace fsdp_train
