#pragma once
// How many units have their gathered buffer alive or being gathered: the
// number the prefetch in-flight limit (max_inflight_all_gathers) is checked
// against. Control only; the byte statistics are MemoryCounter's, which
// also count buffers that are not training gathers (summoned units).

namespace fsdp::detail {

class LiveGatherCount {
 public:
  void add() { ++count_; }
  void sub() { --count_; }
  int count() const { return count_; }

 private:
  int count_ = 0;
};

}  // namespace fsdp::detail
