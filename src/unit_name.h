#pragma once
// How a unit is named in messages: its module path, or "<root>".

#include <string>

namespace fsdp::detail {

inline const std::string& display_name(const std::string& unit_path) {
  static const std::string kRoot = "<root>";
  return unit_path.empty() ? kRoot : unit_path;
}

}  // namespace fsdp::detail
