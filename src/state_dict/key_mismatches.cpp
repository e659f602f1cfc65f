// fsdp::KeyMismatches::message: the one report of names that do not match
// the model, for the state dict loads and the checkpoint's strict check.

#include "fsdp/state_dict.h"

namespace fsdp {
namespace {

void append_list(std::string& out, const std::string& title, const std::vector<std::string>& names) {
  if (names.empty()) return;
  out += "\n  " + title + " (" + std::to_string(names.size()) + "):";
  for (const auto& name : names) out += "\n    " + name;
}

}  // namespace

std::string KeyMismatches::message(const std::string& subject, const std::string& source) const {
  if (ok()) return {};
  const size_t count = missing.size() + unexpected.size() + mismatched.size();
  std::string out = subject + " does not match the model: " + std::to_string(count) + " problem(s) (" +
                    std::to_string(missing.size()) + " missing, " + std::to_string(unexpected.size()) +
                    " unexpected, " + std::to_string(mismatched.size()) + " mismatched)";
  append_list(out, "missing from " + source, missing);
  append_list(out, "unexpected in " + source, unexpected);
  append_list(out, "mismatched", mismatched);
  return out;
}

}  // namespace fsdp
