#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

#include "fsdp/sharded.h"
#include "root_state.h"
#include "unit_module_access.h"
#include "unit_name.h"
#include "unit_state.h"

namespace fsdp {

UnitModule::UnitModule(std::shared_ptr<torch::nn::Module> inner)
    : ModuleWrapper("fsdp::Sharded", std::move(inner)) {}

namespace {

std::vector<detail::UnitState*> unit_states(const std::vector<UnitModule*>& units) {
  std::vector<detail::UnitState*> states;
  for (UnitModule* unit : units) {
    TORCH_CHECK(unit && unit->is_sharded(),
                "fsdp: prefetch lists take units sharded by fully_shard; call fully_shard first");
    states.push_back(detail::UnitModuleAccess::unit_state(*unit));
  }
  return states;
}

}  // namespace

void UnitModule::share_unit_with(UnitModule& leader) {
  TORCH_CHECK(!is_sharded() && !leader.is_sharded(),
              "fsdp: share_unit_with must be called before fully_shard");
  UnitModule* root_leader = &leader;
  while (root_leader->unit_leader_ != nullptr) root_leader = root_leader->unit_leader_;
  TORCH_CHECK(root_leader != this, "fsdp: share_unit_with: a unit cannot share its own unit");
  unit_leader_ = root_leader;
}

void UnitModule::set_forward_prefetch(const std::vector<UnitModule*>& units) {
  TORCH_CHECK(state_, "fsdp: set_forward_prefetch needs a sharded unit; call fully_shard first");
  state_->root().set_prefetch_list(*state_, /*forward=*/true, unit_states(units));
}

void UnitModule::set_backward_prefetch(const std::vector<UnitModule*>& units) {
  TORCH_CHECK(state_, "fsdp: set_backward_prefetch needs a sharded unit; call fully_shard first");
  state_->root().set_prefetch_list(*state_, /*forward=*/false, unit_states(units));
}

void UnitModule::set_requires_gradient_sync(bool requires_sync, bool recurse) {
  for (detail::UnitState* unit :
       detail::units_within(*this, recurse, "set_requires_gradient_sync")) {
    unit->switches().requires_grad_sync = requires_sync;
  }
}

UnshardHandle UnitModule::unshard(bool async_op, bool recurse) {
  UnshardHandle handle;
  for (detail::UnitState* unit : detail::units_within(*this, recurse, "unshard")) {
    unit->hold_unsharded();
    handle.units_.push_back(unit->weak_from_this());
  }
  if (!async_op) handle.wait();
  return handle;
}

void UnshardHandle::wait() {
  for (const auto& weak : units_) {
    if (const auto unit = weak.lock()) unit->finish_unshard();
  }
  units_.clear();
}

void UnitModule::reshard(bool recurse) {
  for (detail::UnitState* unit : detail::units_within(*this, recurse, "reshard")) unit->end_hold();
}

void UnitModule::set_reshard_after_backward(bool reshard, bool recurse) {
  for (detail::UnitState* unit :
       detail::units_within(*this, recurse, "set_reshard_after_backward")) {
    unit->switches().reshard_after_backward = reshard;
  }
}

void UnitModule::set_requires_all_reduce(bool requires_all_reduce, bool recurse) {
  for (detail::UnitState* unit : detail::units_within(*this, recurse, "set_requires_all_reduce")) {
    unit->grads().settings().requires_all_reduce = requires_all_reduce;
  }
}

void UnitModule::set_reshard_after_forward(bool reshard, bool recurse) {
  for (detail::UnitState* unit :
       detail::units_within(*this, recurse, "set_reshard_after_forward")) {
    unit->switches().reshard_after_forward = reshard;
  }
}

void UnitModule::set_gradient_divide_factor(double factor, bool recurse) {
  TORCH_CHECK(std::isfinite(factor) && factor > 0, "fsdp: set_gradient_divide_factor(", factor,
              "): the factor must be a positive number (1.0 sums the gradients; by default they "
              "are divided by the number of ranks they are summed over)");
  const auto units = detail::units_within(*this, recurse, "set_gradient_divide_factor");
  // [Note: no divide factor on aliased units]
  // An aliased unit's .grad() is the full gradient, which autograd keeps
  // accumulating onto last step's reduced value; its reduction then sums
  // that value once per rank and relies on dividing by the rank count to
  // give it back unchanged. Any other factor would rescale it.
  for (detail::UnitState* unit : units) {
    TORCH_CHECK(!unit->params().is_aliased(), "fsdp: set_gradient_divide_factor(", factor,
                "): unit '", detail::display_name(unit->name()),
                "' is not sharded (one rank in its shard group, no mixed precision), "
                "and libfsdp does not support a divide factor there; scale the loss by "
                "(ranks / factor) instead, or set it only on sharded units (recurse = false)");
  }
  for (detail::UnitState* unit : units) unit->grads().settings().divide_factor = factor;
}

void UnitModule::set_all_reduce_hook(AllReduceHook hook, bool recurse) {
  for (detail::UnitState* unit : detail::units_within(*this, recurse, "set_all_reduce_hook")) {
    unit->grads().settings().all_reduce_hook = hook;
  }
}

void UnitModule::set_validate_execution_order(bool every_step) {
  detail::root_state_of(*this, "set_validate_execution_order")
      .validation()
      .set_every_step(every_step);
}

void UnitModule::before_forward(detail::TensorRefs& inputs) { state_->pre_forward(inputs); }

void UnitModule::after_forward(detail::TensorRefs& outputs) { state_->post_forward(outputs); }

void UnitModule::forward_failed() noexcept { state_->abort_forward_quietly(); }

namespace detail {

std::vector<UnitState*> units_within(const UnitModule& unit, bool recurse, const char* api) {
  TORCH_CHECK(unit.is_sharded(), "fsdp: ", api,
              " needs a unit sharded by fully_shard; call it after fully_shard");
  std::vector<UnitState*> states;
  const auto add = [&states](const UnitModule& module) {
    UnitState* state = UnitModuleAccess::unit_state(module);
    // Units sharing one state (share_unit_with) count once.
    if (state && std::find(states.begin(), states.end(), state) == states.end())
      states.push_back(state);
  };
  add(unit);
  if (!recurse) return states;
  for (const auto& module : unit.modules(/*include_self=*/false)) {
    if (const auto* nested = dynamic_cast<const UnitModule*>(module.get())) add(*nested);
  }
  return states;
}

RootState& root_state_of(const UnitModule& root, const char* api) {
  RootState* state = UnitModuleAccess::root_state(root);
  TORCH_CHECK(state, "fsdp: ", api, " needs the root module that fully_shard returned; this module is ",
              root.is_sharded() ? "a nested unit" : "not sharded");
  return *state;
}

}  // namespace detail
}  // namespace fsdp
