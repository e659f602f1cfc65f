#pragma once
// The runtime state fully_shard attaches to a UnitModule. It is library
// internal: the public header keeps it private and befriends this class,
// the one door the library uses.

#include <memory>
#include <vector>

#include "fsdp/sharded.h"

namespace fsdp::detail {

class RootState;
class UnitState;

class UnitModuleAccess {
 public:
  static UnitState* unit_state(const UnitModule& unit) { return unit.state_.get(); }
  static void attach_unit_state(UnitModule& unit, std::shared_ptr<UnitState> state) {
    unit.state_ = std::move(state);
  }
  // Set on the root only; null on every other module.
  static RootState* root_state(const UnitModule& unit) { return unit.root_state_.get(); }
  static void attach_root_state(UnitModule& root, std::shared_ptr<RootState> state) {
    root.root_state_ = std::move(state);
  }
};

// `unit`'s state and, with `recurse`, that of every unit inside its module,
// each once, in pre-order. Throws, naming `api`, when `unit` is not sharded.
std::vector<UnitState*> units_within(const UnitModule& unit, bool recurse, const char* api);

// The state of the model `root` is the root of. Throws, naming `api`, when
// `root` is not the module fully_shard returned.
RootState& root_state_of(const UnitModule& root, const char* api);

}  // namespace fsdp::detail
