#pragma once
// Integer rounding shared inside src/: wire-format alignment, O_DIRECT
// blocks, host-copy alignment.

#include <cstdint>

namespace fsdp {

// `n` (>= 0) rounded up to a multiple of `multiple` (> 0).
constexpr int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace fsdp
