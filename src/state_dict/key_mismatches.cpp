// fsdp::KeyMismatches::message: the one report of names that do not match
// the model, for the state dict loads and the checkpoint's strict check.

#include <fmt/format.h>

#include "fsdp/state_dict.h"

namespace fsdp {
namespace {

void append_list(std::string& out, const std::string& title, const std::vector<std::string>& names) {
  if (names.empty()) return;
  out += fmt::format("\n  {} ({}):", title, names.size());
  for (const auto& name : names) out += "\n    " + name;
}

}  // namespace

std::string KeyMismatches::message(const std::string& subject, const std::string& source) const {
  if (ok()) return {};
  const size_t count = missing.size() + unexpected.size() + mismatched.size();
  std::string out = fmt::format("{} does not match the model: {} problem(s) ({} missing, {} unexpected, {} "
                                "mismatched)",
                                subject, count, missing.size(), unexpected.size(), mismatched.size());
  append_list(out, "missing from " + source, missing);
  append_list(out, "unexpected in " + source, unexpected);
  append_list(out, "mismatched", mismatched);
  return out;
}

}  // namespace fsdp
