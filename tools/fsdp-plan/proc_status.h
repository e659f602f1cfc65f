#pragma once
// This process's memory as the kernel reports it (/proc/self/status).

namespace fsdp_plan {

// A "Vm..." field of /proc/self/status in bytes (e.g. "VmRSS:", "VmHWM:"),
// or 0 where it cannot be read.
double proc_status_bytes(const char* field);

}  // namespace fsdp_plan
