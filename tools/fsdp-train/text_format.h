#pragma once
// Human-readable numbers for the trainer's console output.

#include <cstdint>
#include <string>

namespace fsdp_train {

// 1536 -> "1.5 KiB"; 3407872 -> "3.25 MiB".
std::string human_bytes(int64_t bytes);
// 12345.6 -> "12.3k"; 2.5e6 -> "2.50M".
std::string human_count(double value);
// 125.2 -> "2m05s"; 3725 -> "1h02m"; 9.4 -> "9.4s".
std::string human_duration(double seconds);

}  // namespace fsdp_train
