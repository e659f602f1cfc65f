#include "unit_discovery.h"

#include <c10/util/Exception.h>

#include <unordered_map>
#include <unordered_set>

namespace fsdp::detail {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

const char* shown(const std::string& unit) { return unit.empty() ? "<root>" : unit.c_str(); }

class Walker {
 public:
  DiscoveredModel model;

  void visit(torch::nn::Module& module, const std::string& path, size_t owner) {
    for (const auto& param : module.named_parameters(/*recurse=*/false)) {
      claim(param.value(), join(path, param.key()), owner);
    }
    for (const auto& buffer : module.named_buffers(/*recurse=*/false)) {
      if (seen_buffers_.insert(buffer.value().unsafeGetTensorImpl()).second) {
        model.buffers.push_back(buffer.value());
        model.buffer_names.push_back(join(path, buffer.key()));
      }
    }
    for (const auto& child : module.named_children()) {
      const std::string child_path = join(path, child.key());
      size_t child_owner = owner;
      if (auto* unit = dynamic_cast<UnitModule*>(child.value().get())) {
        TORCH_CHECK(!unit->is_sharded(), "fsdp: unit '", child_path,
                    "' is already sharded (by another fully_shard call); wrap each module once");
        child_owner = add_unit(unit, child_path);
      }
      visit(*child.value(), child_path, child_owner);
    }
  }

  size_t add_unit(UnitModule* unit, const std::string& path) {
    TORCH_CHECK(seen_units_.insert(unit).second, "fsdp: unit '", path,
                "' appears twice in the model; a unit can be registered in one place only");
    model.units.push_back(DiscoveredUnit{unit, path, {}, {}});
    return model.units.size() - 1;
  }

 private:
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
                name, "') is shared by units '", shown(model.units[first.unit].name), "' and '",
                shown(model.units[owner].name),
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
};

}  // namespace

DiscoveredModel discover_units(UnitModule& root) {
  TORCH_CHECK(!root.is_sharded(), "fsdp: this model is already sharded; call fully_shard once");
  Walker walker;
  walker.add_unit(&root, "");
  walker.visit(root, "", 0);
  return std::move(walker.model);
}

}  // namespace fsdp::detail
