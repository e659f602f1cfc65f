#pragma once
// State shared by every unit of one fully_shard() call: the unit list, the
// step-level state (are we in backward? was the final callback queued?), the
// recorded execution order for prefetch and validation, and the memory
// accounting. The root unit owns it; other units point to it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdp/comm/process_group.h"
#include "grad_reduction_queue.h"
#include "live_gather_count.h"
#include "memory_counter.h"
#include "unit_state.h"
#include "validation_schedule.h"

namespace fsdp::detail {

// A parameter left out of every unit (ignored_modules / ignored_params):
// whole and replicated on every rank. See [Note: ignored parameters].
struct IgnoredParam {
  std::string name;  // its first fully qualified name
  at::Tensor param;
};

class RootState {
 public:
  // `validate_every_step`: run the first step's checks on every step.
  RootState(ProcessGroupPtr world, int max_inflight_all_gathers, bool validate_every_step);

  // Units in pre-order; units()[0] is the root.
  void add_unit(std::shared_ptr<UnitState> unit) { units_.push_back(std::move(unit)); }
  const std::vector<std::shared_ptr<UnitState>>& units() const { return units_; }
  UnitState& root_unit() { return *units_.front(); }
  ProcessGroup& world() { return *world_; }

  // Called by each unit's pre_forward, before it gathers.
  void on_pre_forward(UnitState& unit);
  // Called by each unit's pre_backward and post_backward: makes sure the
  // final callback is queued for this backward.
  void on_backward_hook();
  // The engine's final callback: finishes every unit's step.
  void on_backward_done();

  // A backward that began and ended in an exception (its final callback
  // never ran) leaves the units mid-step: reset them. A no-op otherwise.
  // See [Note: recovery after an exception].
  void recover_from_failed_step();
  // Every unit back to idle, sharded, nothing in flight; the step forgotten.
  void reset_after_failure();

  bool root_forward_active() const { return root_forward_depth_ > 0; }
  bool in_backward() const { return in_backward_; }
  void enter_root_forward() { ++root_forward_depth_; }
  void exit_root_forward();

  // Gradient sync (no_sync / set_requires_gradient_sync).
  bool requires_grad_sync() const { return requires_grad_sync_; }
  void set_requires_grad_sync(bool on) { requires_grad_sync_ = on; }

  // Which steps run the costly checks.
  ValidationSchedule& validation() { return validation_; }

  // Issues prefetching gathers after `unit` gathered (see [Note: prefetch]).
  void prefetch_after(UnitState& unit, bool forward);

  MemoryCounter& gathered_bytes() { return gathered_bytes_; }
  // Units gathered or gathering: what the prefetch in-flight limit reads.
  LiveGatherCount& live_gathers() { return live_gathers_; }
  // Chunks kept by post-forward reshards to a smaller group.
  MemoryCounter& post_forward_bytes() { return post_forward_bytes_; }
  // Gradient reductions in flight ([Note: bounded gradient reductions]).
  GradReductionQueue& reductions() { return reductions_; }
  // Full parameter bytes materialized at once during deferred init.
  MemoryCounter& init_bytes() { return init_bytes_; }
  // Parameters left out of every unit, each tensor once, in
  // named_parameters() order.
  void set_ignored_params(std::vector<IgnoredParam> params) { ignored_params_ = std::move(params); }
  const std::vector<IgnoredParam>& ignored_params() const { return ignored_params_; }
  // SummonFullParams guards on this model must end in reverse order of
  // creation. A guard opens with a new id and closes with it; closing
  // returns false, changing nothing, unless it is the innermost open one.
  int64_t open_summon_guard();
  bool close_summon_guard(int64_t id);

 private:
  void validate_order(UnitState& unit, size_t position);
  // Starts gathering `unit` unless the in-flight limit is reached; returns
  // false when it is.
  bool try_prefetch(UnitState& unit);

  ProcessGroupPtr world_;
  std::vector<std::shared_ptr<UnitState>> units_;
  int root_forward_depth_ = 0;
  bool in_backward_ = false;
  bool callback_queued_ = false;
  bool requires_grad_sync_ = true;
  ValidationSchedule validation_;
  int max_inflight_all_gathers_;
  std::vector<UnitState*> recording_order_;
  std::vector<UnitState*> forward_order_;
  MemoryCounter gathered_bytes_;
  LiveGatherCount live_gathers_;
  MemoryCounter post_forward_bytes_;
  MemoryCounter init_bytes_;
  GradReductionQueue reductions_;
  std::vector<int64_t> open_summon_guards_;  // innermost last
  int64_t summon_guards_made_ = 0;
  std::vector<IgnoredParam> ignored_params_;
};

}  // namespace fsdp::detail
