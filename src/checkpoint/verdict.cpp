#include "checkpoint/verdict.h"

#include <c10/util/Exception.h>

#include "fsdp/comm/process_group.h"
#include "fsdp/error_message.h"

namespace fsdp::ckpt::detail {

using json = nlohmann::json;

Verdict Verdict::success(json result) { return Verdict{true, {}, std::move(result)}; }

Verdict Verdict::failure(std::string message) { return Verdict{false, std::move(message), json()}; }

std::string Verdict::encode() const {
  return json{{"ok", ok}, {"message", message}, {"result", result}}.dump();
}

Verdict Verdict::decode(const std::string& text) {
  try {
    const json j = json::parse(text);
    return Verdict{j.at("ok").get<bool>(), j.at("message").get<std::string>(), j.at("result")};
  } catch (const json::exception& e) {
    TORCH_CHECK(false, "fsdp: internal: a rank sent a malformed checkpoint verdict (", error_message(e),
                "): ", text.substr(0, 200));
  }
}

std::vector<Verdict> all_gather_verdicts(ProcessGroup& group, const Verdict& mine) {
  std::vector<Verdict> verdicts;
  for (const auto& text : all_gather_strings(group, mine.encode())) verdicts.push_back(Verdict::decode(text));
  return verdicts;
}

}  // namespace fsdp::ckpt::detail
