#pragma once
// One profile from several measurements of the same machine ([Note:
// repeated calibration] in median_profile.cpp): calibrate's passes within
// one process (`calibrate --repeats`).

#include <vector>

#include "hardware_profile.h"

namespace fsdp_plan {

// Each timing figure the median over `passes`, figures fitted together
// taken from one pass, memory figures the first pass's. `passes` must not
// be empty.
HardwareProfile median_profile(const std::vector<HardwareProfile>& passes);

}  // namespace fsdp_plan
