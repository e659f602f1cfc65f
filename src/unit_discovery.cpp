#include "unit_discovery.h"

#include <c10/util/Exception.h>

#include <unordered_map>
#include <unordered_set>

#include "fsdp/checkpointed.h"
#include "unit_name.h"

namespace fsdp::detail {
namespace {

// [Note: ignored parameters]
// Ignored parameters (FSDP's ignored_modules / ignored_params) are simply
// never claimed by a unit: they keep their full data on every rank, no
// collective touches them, and autograd accumulates their full gradients as
// in a single process. Keeping replicas equal is the user's job (all-reduce
// their gradients, or freeze them). Ignoring is all-or-nothing per tensor, so
// a parameter reachable both inside and outside an ignored module is ignored.
class Walker {
 public:
  explicit Walker(const IgnoredSet& ignored) : ignored_(ignored) {}
  DiscoveredModel model;

  // `checkpointed`: the path of the checkpointed module or unit this module
  // is inside, if any.
  void visit(torch::nn::Module& module, const std::string& path, size_t owner,
             const c10::optional<std::string>& checkpointed = c10::nullopt) {
    for (const auto& param : module.named_parameters(/*recurse=*/false)) {
      if (ignored_.params.count(param.value().unsafeGetTensorImpl())) {
        model.ignored_param_names.push_back(join_module_path(path, param.key()));
        continue;
      }
      claim(param.value(), join_module_path(path, param.key()), owner);
    }
    for (const auto& buffer : module.named_buffers(/*recurse=*/false)) {
      if (seen_buffers_.insert(buffer.value().unsafeGetTensorImpl()).second) {
        model.buffers.push_back(buffer.value());
        model.buffer_names.push_back(join_module_path(path, buffer.key()));
      }
    }
    for (const auto& child : module.named_children()) {
      const std::string child_path = join_module_path(path, child.key());
      if (is_ignored(*child.value())) {
        for (const auto& p : child.value()->named_parameters()) {
          model.ignored_param_names.push_back(join_module_path(child_path, p.key()));
        }
        continue;
      }
      size_t child_owner = owner;
      c10::optional<std::string> child_checkpointed = checkpointed;
      if (auto* unit = dynamic_cast<UnitModule*>(child.value().get())) {
        TORCH_CHECK(!unit->is_sharded(), "fsdp: unit '", child_path,
                    "' is already sharded (by another fully_shard call); wrap each module once");
        if (checkpointed) refuse_unit_in_checkpoint(child_path, *checkpointed);
        child_owner = add_unit(unit, child_path, owner);
        if (unit->activation_checkpointing()) child_checkpointed = child_path;
      } else if (dynamic_cast<CheckpointedModule*>(child.value().get()) && !checkpointed) {
        child_checkpointed = child_path;
      }
      visit(*child.value(), child_path, child_owner, child_checkpointed);
    }
  }

  // Returns the unit's index; a unit sharing another's unit (see
  // UnitModule::share_unit_with) gets that one's. `owner`: the index of the
  // unit enclosing it, if any.
  size_t add_unit(UnitModule* unit, const std::string& path, c10::optional<size_t> owner = c10::nullopt) {
    TORCH_CHECK(seen_units_.insert(unit).second, "fsdp: unit '", path,
                "' appears twice in the model; a unit can be registered in one place only");
    UnitModule* key = unit->shared_unit_leader() ? unit->shared_unit_leader() : unit;
    const auto found = unit_index_.find(key);
    if (found == unit_index_.end()) {
      unit_index_.emplace(key, model.units.size());
      model.units.push_back(DiscoveredUnit{key, path, {}, {}, {unit}});
      return model.units.size() - 1;
    }
    DiscoveredUnit& shared = model.units[found->second];
    TORCH_CHECK(owner != found->second, "fsdp: unit '", path, "' shares the unit of '",
                display_name(shared.name),
                "', which holds it; the modules of one unit must be siblings, neither inside the other");
    shared.name += "+" + path;
    shared.members.push_back(unit);
    return found->second;
  }

  // Every shared unit's leader must be in the model too.
  void check_leaders_present() const {
    for (const auto& unit : model.units) {
      TORCH_CHECK(seen_units_.count(unit.module), "fsdp: unit '", unit.name,
                  "' shares the unit of a module that is not in this model; call "
                  "share_unit_with on a unit of the same model");
    }
  }

 private:
  static void refuse_unit_in_checkpoint(const std::string& unit, const std::string& checkpointed) {
    TORCH_CHECK(false, "fsdp: unit '", unit, "' is inside the checkpointed module '",
                display_name(checkpointed),
                "'; running it again in backward would run a unit's forward inside backward. "
                "Checkpoint the inner units instead (set_activation_checkpointing(true) on each, "
                "or fsdp::Checkpointed<M> inside them), or do not make '", unit, "' a unit");
  }

  bool is_ignored(const torch::nn::Module& module) const {
    if (ignored_.modules.count(&module)) return true;
    const auto* unit = dynamic_cast<const UnitModule*>(&module);
    return unit && ignored_.modules.count(unit->wrapped().get());
  }

  void claim(const at::Tensor& param, const std::string& name, size_t owner) {
    auto* impl = param.unsafeGetTensorImpl();
    auto it = owners_.find(impl);
    if (it == owners_.end()) {
      owners_.emplace(impl, Owner{owner, name});
      model.units[owner].params.push_back(param);
      model.units[owner].param_names.push_back(name);
      return;
    }
    const Owner& first = it->second;
    TORCH_CHECK(first.unit == owner, "fsdp: parameter '", first.name, "' (also reachable as '",
                name, "') is shared by units '", display_name(model.units[first.unit].name), "' and '",
                display_name(model.units[owner].name),
                "'. Tied parameters must live in one unit: make the module that holds both uses "
                "(e.g. the root) own them, and do not wrap the tied submodules as separate units");
  }

  struct Owner {
    size_t unit;
    std::string name;
  };
  std::unordered_map<c10::TensorImpl*, Owner> owners_;
  std::unordered_set<const c10::TensorImpl*> seen_buffers_;
  std::unordered_set<const UnitModule*> seen_units_;
  std::unordered_map<const UnitModule*, size_t> unit_index_;
  const IgnoredSet& ignored_;
};

}  // namespace

DiscoveredModel discover_units(UnitModule& root, const IgnoredSet& ignored) {
  TORCH_CHECK(!root.is_sharded(), "fsdp: this model is already sharded; call fully_shard once");
  TORCH_CHECK(root.shared_unit_leader() == nullptr,
              "fsdp: the root cannot share another unit's unit; call share_unit_with on its submodules");
  TORCH_CHECK(!ignored.modules.count(&root) && !ignored.modules.count(root.wrapped().get()),
              "fsdp: the root module is in ignored_modules; ignore its submodules instead, or "
              "do not call fully_shard");
  Walker walker(ignored);
  walker.add_unit(&root, "");
  walker.visit(root, "", 0,
               root.activation_checkpointing() ? c10::optional<std::string>("") : c10::nullopt);
  walker.check_leaders_present();
  return std::move(walker.model);
}

}  // namespace fsdp::detail
