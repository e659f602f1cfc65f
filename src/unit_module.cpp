#include <c10/util/Exception.h>

#include "fsdp/sharded.h"
#include "root_state.h"
#include "unit_module_access.h"
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

void UnitModule::set_requires_gradient_sync(bool requires_sync) {
  detail::root_state_of(*this, "set_requires_gradient_sync").set_requires_grad_sync(requires_sync);
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

RootState& root_state_of(const UnitModule& root, const char* api) {
  RootState* state = UnitModuleAccess::root_state(root);
  TORCH_CHECK(state, "fsdp: ", api, " needs the root module that fully_shard returned; this module is ",
              root.is_sharded() ? "a nested unit" : "not sharded");
  return *state;
}

}  // namespace detail
}  // namespace fsdp
