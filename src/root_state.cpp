#include "root_state.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <sstream>

#include "hook_ranges.h"
#include "unit_name.h"

namespace fsdp::detail {

RootState::RootState(ProcessGroupPtr world, int max_inflight_all_gathers, bool validate_every_step)
    : world_(std::move(world)),
      validation_(validate_every_step),
      max_inflight_all_gathers_(max_inflight_all_gathers) {}

void RootState::add_unit(std::shared_ptr<UnitState> unit) {
  schedules_[unit.get()].index = units_.size();
  units_.push_back(std::move(unit));
}

RootState::UnitSchedule& RootState::schedule_of(const UnitState& unit) {
  const auto it = schedules_.find(&unit);
  TORCH_INTERNAL_ASSERT(it != schedules_.end(), "a unit of another model");
  return it->second;
}

void RootState::set_prefetch_list(const UnitState& unit, bool forward,
                                  std::vector<UnitState*> targets) {
  UnitSchedule& schedule = schedule_of(unit);
  (forward ? schedule.forward_prefetch : schedule.backward_prefetch) = std::move(targets);
}

void RootState::on_pre_forward(UnitState& unit) {
  if (!root_forward_active()) return;  // a unit on its own; see [Note: a unit's forward on its own]
  if (validation_.checks_order()) validate_order(unit, recording_order_.size());
  recording_order_.push_back(&unit);
}

void RootState::exit_root_forward() {
  TORCH_INTERNAL_ASSERT(root_forward_depth_ > 0);
  if (--root_forward_depth_ > 0) return;
  // Swap keeps both vectors' capacity: no allocation per step.
  forward_order_.swap(recording_order_);
  recording_order_.clear();
  for (size_t i = 0; i < forward_order_.size(); ++i)
    schedule_of(*forward_order_[i]).order_position = i;
  validation_.root_forward_done();
}

// [Note: execution order validation]
// FSDP's collectives match up only if every rank gathers the same units in
// the same order. If a rank took another branch, the gathers would pair up
// wrong and fail obscurely or hang until the timeout. So on the first step
// (and on every step with FSDP_DEBUG=1) the ranks agree on each unit before
// gathering it: a tiny all-gather of its index.
void RootState::validate_order(UnitState& unit, size_t position) {
  const auto index = static_cast<int64_t>(schedule_of(unit).index);
  const std::vector<int64_t> indices = all_gather_int64(*world_, index);
  if (std::all_of(indices.begin(), indices.end(), [&](int64_t i) { return i == index; })) return;
  std::ostringstream ranks;
  for (size_t r = 0; r < indices.size(); ++r) {
    const auto& name = units_.at(static_cast<size_t>(indices[r]))->name();
    ranks << (r ? ", " : "") << "rank " << r << " ran '" << display_name(name) << "'";
  }
  TORCH_CHECK(false, "fsdp: ranks ran units in different orders: at forward position ", position,
              ", ", ranks.str(),
              ". Every rank must run the same units in the same order; control flow that depends "
              "on rank-local data is not supported");
}

// [Note: prefetch]
// Gloo and NCCL run collectives off the compute thread, so a gather issued
// early overlaps the current unit's compute. Forward: once a unit is
// gathered, issue the gathers of the units that ran after it last step.
// Backward runs the units in reverse, so a unit's pre-backward issues the
// gather of the unit that ran before it. A unit's own prefetch list, if set,
// replaces the recorded order. Gathered memory is bounded: at most
// max_inflight_all_gathers non-root units are gathered or being gathered.
void RootState::prefetch_after(UnitState& unit, bool forward) {
  const UnitSchedule& schedule = schedule_of(unit);
  const auto& explicit_list = forward ? schedule.forward_prefetch : schedule.backward_prefetch;
  if (!explicit_list.empty()) {
    for (UnitState* next : explicit_list) {
      if (!try_prefetch(*next)) break;
    }
    return;
  }
  if (!forward && unit.config().is_root && !forward_order_.empty()) {
    // The root's forward encloses all others, so its backward starts first
    // and the unit that ran last comes next.
    try_prefetch(*forward_order_.back());
    return;
  }
  const size_t position = schedule.order_position;
  if (position >= forward_order_.size() || forward_order_[position] != &unit) return;
  if (forward) {
    // Look no further ahead than the limit could ever allow.
    const size_t end = std::min(forward_order_.size(),
                                position + 1 + static_cast<size_t>(max_inflight_all_gathers_));
    for (size_t i = position + 1; i < end; ++i) {
      if (!try_prefetch(*forward_order_[i])) break;
    }
  } else if (position > 0) {
    try_prefetch(*forward_order_[position - 1]);
  }
}

bool RootState::try_prefetch(UnitState& unit) {
  if (unit.config().is_root) return true;
  FlatParamGroup& params = unit.params();
  if (params.holds_gathered_buffer() || params.is_aliased()) return true;
  const bool root_alive = root_unit().params().holds_gathered_buffer();
  const int non_root_alive = counters_->live_gathers.count() - (root_alive ? 1 : 0);
  if (non_root_alive >= max_inflight_all_gathers_) return false;
  params.unshard_async();
  return true;
}

void RootState::on_backward_hook() {
  if (callback_queued_) return;
  callback_queued_ = true;
  in_backward_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { on_backward_done(); });
}

// The end of backward: units that backward never fully reached (the root,
// units whose inputs need no gradient) reduce now, in reverse pre-order
// (units()), so every rank issues the same sequence whatever order its
// backward ran in; then everything is waited for.
void RootState::on_backward_done() {
  RECORD_USER_SCOPE(kRootPostBackwardRange);
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) (*it)->finish_backward_step();
  reductions_.finish_all();
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) (*it)->end_backward();
  callback_queued_ = false;
  in_backward_ = false;
  validation_.backward_done();
}

void RootState::recover_from_failed_step() {
  // The engine sets a current graph task on the thread running backward;
  // none means the backward this flag belongs to has ended.
  if (in_backward_ && torch::autograd::get_current_graph_task_exec_info() == nullptr) {
    reset_after_failure();
  }
}

void RootState::reset_after_failure() {
  reductions_.forget();
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) (*it)->reset_after_failure();
  root_forward_depth_ = 0;
  recording_order_.clear();
  in_backward_ = false;
  callback_queued_ = false;
}

int64_t RootState::open_summon_guard() {
  open_summon_guards_.push_back(++summon_guards_made_);
  return open_summon_guards_.back();
}

bool RootState::close_summon_guard(int64_t id) {
  if (open_summon_guards_.empty() || open_summon_guards_.back() != id) return false;
  open_summon_guards_.pop_back();
  return true;
}

}  // namespace fsdp::detail
