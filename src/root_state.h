#pragma once
// State shared by every unit of one fully_shard() call: the unit list, the
// step-level state (are we in backward? was the final callback queued?), the
// recorded execution order and each unit's place in it for prefetch and
// validation, and the memory accounting. The root unit owns it; other units
// point to it.

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "fsdp/comm/process_group.h"
#include "grad_reduction_queue.h"
#include "model_counters.h"
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
  void add_unit(std::shared_ptr<UnitState> unit);
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

  // Which steps run the costly checks.
  ValidationSchedule& validation() { return validation_; }

  // Issues prefetching gathers after `unit` gathered (see [Note: prefetch]).
  void prefetch_after(UnitState& unit, bool forward);
  // Explicit prefetch targets of `unit`, in issue order, replacing the
  // recorded order; empty: the recorded order again.
  void set_prefetch_list(const UnitState& unit, bool forward, std::vector<UnitState*> targets);

  // The model's byte and gather counts, shared with every unit's storage.
  const std::shared_ptr<ModelCounters>& counters() const { return counters_; }
  // Gradient reductions in flight ([Note: bounded gradient reductions]).
  GradReductionQueue& reductions() { return reductions_; }
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
  // What the root knows of one unit's place in the step.
  struct UnitSchedule {
    size_t index = 0;  // in units_
    // In the last recorded forward order; npos until the unit is recorded.
    size_t order_position = static_cast<size_t>(-1);
    std::vector<UnitState*> forward_prefetch;   // explicit targets, issue order
    std::vector<UnitState*> backward_prefetch;  // empty: the recorded order
  };
  UnitSchedule& schedule_of(const UnitState& unit);
  void validate_order(UnitState& unit, size_t position);
  // Starts gathering `unit` unless the in-flight limit is reached; returns
  // false when it is.
  bool try_prefetch(UnitState& unit);

  ProcessGroupPtr world_;
  std::vector<std::shared_ptr<UnitState>> units_;
  int root_forward_depth_ = 0;
  bool in_backward_ = false;
  bool callback_queued_ = false;
  ValidationSchedule validation_;
  int max_inflight_all_gathers_;
  std::vector<UnitState*> recording_order_;
  std::vector<UnitState*> forward_order_;
  std::unordered_map<const UnitState*, UnitSchedule> schedules_;  // one per unit
  std::shared_ptr<ModelCounters> counters_ = std::make_shared<ModelCounters>();
  GradReductionQueue reductions_;
  std::vector<int64_t> open_summon_guards_;  // innermost last
  int64_t summon_guards_made_ = 0;
  std::vector<IgnoredParam> ignored_params_;
};

}  // namespace fsdp::detail
