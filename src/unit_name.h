#pragma once
// How modules and units are named: module paths, and "<root>" in messages.

#include <string>

namespace fsdp::detail {

// A child's module path: "blocks.0" and "mlp" give "blocks.0.mlp"; the root's
// children ("" as prefix) are named by their own name.
inline std::string join_module_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

inline const std::string& display_name(const std::string& unit_path) {
  static const std::string kRoot = "<root>";
  return unit_path.empty() ? kRoot : unit_path;
}

}  // namespace fsdp::detail
