#pragma once
// Tensor-byte accounting of gathered (unsharded) parameters: how many bytes
// are alive now and the most alive at once since the last reset. Memory
// bounds in tests are asserted on these numbers, which are deterministic,
// rather than on allocator readings.

#include <algorithm>
#include <cstdint>

namespace fsdp::detail {

class MemoryCounter {
 public:
  // One unit's gathered buffer came alive (or is being gathered).
  void add(int64_t bytes) {
    current_ += bytes;
    peak_ = std::max(peak_, current_);
    ++units_;
    peak_units_ = std::max(peak_units_, units_);
  }
  void sub(int64_t bytes) {
    current_ -= bytes;
    --units_;
  }
  void reset_peak() {
    peak_ = current_;
    peak_units_ = units_;
  }
  int64_t current() const { return current_; }
  int64_t peak() const { return peak_; }
  int units() const { return units_; }
  int peak_units() const { return peak_units_; }

 private:
  int64_t current_ = 0;
  int64_t peak_ = 0;
  int units_ = 0;
  int peak_units_ = 0;
};

}  // namespace fsdp::detail
