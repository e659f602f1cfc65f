#pragma once
// fsdp::HookTimer: the wall time spent inside libfsdp's hooks, by hook.
//
//   {
//     fsdp::HookTimer timer;              // starts counting, on every thread
//     train_one_step(model, optimizer);
//     for (const fsdp::HookTime& t : timer.take())
//       std::printf("%s: %ld calls, %.1f us\n", t.range.c_str(), t.calls, 1e6 * t.seconds);
//   }
//
// Each hook of a unit runs inside a LibTorch profiler range whose name is
// FSDP2's (see [Note: the hooks' profiler ranges] in src/hook_ranges.h):
//
//   FSDP::pre_forward                       gather, or wait for a prefetch
//   FSDP::post_forward                      hook the outputs; free
//   FSDP::pre_backward                      gather again; stash the gradients
//   FSDP::post_backward                     reduce-scatter; free
//   FSDP::root_post_backward_callback       the end of backward: finish, wait
//
// so any LibTorch trace (Kineto, chrome://tracing) shows them. A HookTimer
// sums the outermost of these ranges, and any other range whose name starts
// with "FSDP::", over every thread (backward on a GPU runs on the autograd
// engine's device threads). It times wall time: on a GPU the hooks only
// enqueue work, so this is the framework's CPU cost; with a CPU process group
// it includes the waits for collectives.
//
// Only one HookTimer may live at a time. While none does, the ranges cost a
// check of LibTorch's callback list each.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fsdp {

struct HookTime {
  std::string range;  // e.g. "FSDP::pre_forward"
  int64_t calls = 0;  // outermost entries
  double seconds = 0;  // wall time inside them
};

class HookTimer {
 public:
  // Starts counting. Throws if another HookTimer is alive.
  HookTimer();
  ~HookTimer();
  HookTimer(const HookTimer&) = delete;
  HookTimer& operator=(const HookTimer&) = delete;

  // The totals per range since this timer started or since the last take(),
  // in the order the ranges were first seen; they restart from zero.
  std::vector<HookTime> take();

 private:
  uint64_t callback_handle_ = 0;
};

// The total of `times` over every range, in seconds.
double total_seconds(const std::vector<HookTime>& times);

// The hook's name without the "FSDP::" of its range: "pre_forward".
std::string hook_name(const HookTime& time);

}  // namespace fsdp
