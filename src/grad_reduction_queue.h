#pragma once
// The gradient reductions of one fully_shard() call that are in flight, oldest
// first, with the bytes their buffers hold. The one place that starts and
// finishes a unit's reduction.
//
// [Note: bounded gradient reductions]
// A unit's reduction holds a full-size buffer (every rank's slice of its full
// gradient, in the reduce dtype) until it is finished: waited for, and the
// reduced shard installed. Finishing them all at the end of backward kept
// every unit's full gradient alive at once, so the last moment of backward
// held the whole model's gradients unsharded: ZeRO-3 saved nothing there
// (fsdp-plan's validation found it, as a peak far above the plan). Like
// FSDP2, a unit issuing its reduction now finishes the ones before it, so at
// most two buffers are alive: the one just issued, which runs while backward
// computes the next unit, and the one before it, finished right after the new
// one is queued. Every rank issues reductions in the same order (the lanes
// need it already), so finishing in issue order keeps the ranks in step
// (a hybrid mesh's replica all-reduce happens at finishing).

#include <cstdint>
#include <deque>
#include <utility>

#include "memory_counter.h"

namespace fsdp::detail {

class FlatParamGrads;

class GradReductionQueue {
 public:
  // At most this many reductions stay in flight once a new one is issued.
  static constexpr size_t kInFlight = 1;

  // Starts reducing `grads`; finishes older reductions beyond the limit.
  void issue(FlatParamGrads& grads);
  // Finishes every reduction in flight (the end of backward).
  void finish_all();
  // Forgets them: the units' own reset waits and frees (after an exception).
  void forget();

  // Reduction buffer bytes alive now, and the peak since reset.
  MemoryCounter& bytes() { return bytes_; }

 private:
  void finish_oldest();

  std::deque<std::pair<FlatParamGrads*, int64_t>> in_flight_;  // oldest first
  MemoryCounter bytes_;
};

}  // namespace fsdp::detail
