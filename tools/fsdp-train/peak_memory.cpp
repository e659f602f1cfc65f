#include "peak_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace fsdp_train {

StepPeakMemory::StepPeakMemory() : counter_(fsdp::CpuAllocationCounter::install()) {}

void StepPeakMemory::start_step() { counter_.reset_peak(); }

int64_t StepPeakMemory::step_peak_tensor_bytes() const { return counter_.peak_bytes(); }

int64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string name;
    int64_t kib = 0;
    if (fields >> name >> kib && name == "VmHWM:") return kib * 1024;
  }
  return 0;
}

}  // namespace fsdp_train
