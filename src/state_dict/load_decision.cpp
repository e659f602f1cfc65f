#include "state_dict/load_decision.h"

#include <c10/util/Exception.h>

#include "fsdp/error_message.h"
#include "state_dict/unit_gather.h"

namespace fsdp::detail {

using json = nlohmann::json;

std::string LoadDecision::encode() const {
  return json{{"plan", plan},
              {"missing", problems.missing},
              {"unexpected", problems.unexpected},
              {"mismatched", problems.mismatched}}
      .dump();
}

LoadDecision LoadDecision::decode(const std::string& text) {
  try {
    const json j = json::parse(text);
    LoadDecision decision;
    decision.plan = j.at("plan");
    decision.problems.missing = j.at("missing").get<std::vector<std::string>>();
    decision.problems.unexpected = j.at("unexpected").get<std::vector<std::string>>();
    decision.problems.mismatched = j.at("mismatched").get<std::vector<std::string>>();
    return decision;
  } catch (const json::exception& e) {
    TORCH_CHECK(false, "fsdp: internal: rank 0 sent a malformed load decision (", error_message(e), "): ",
                text.substr(0, 200));
  }
}

LoadDecision agree_on_load(ProcessGroup& world, const char* api, const LoadStateDictOptions& options,
                           size_t num_targets, const char* targets,
                           const std::function<LoadDecision()>& decide) {
  LoadDecision decision;
  if (options.rank0_only() && world.size() > 1) {
    const std::string mine = world.rank() == 0 ? decide().encode() : std::string();
    decision = LoadDecision::decode(from_rank0(world, mine));
  } else {
    decision = decide();
  }
  TORCH_CHECK(decision.plan.size() == num_targets, "fsdp: ", api, ": rank 0's model has ",
              decision.plan.size(), " ", targets, ", rank ", world.rank(), "'s has ", num_targets,
              "; every rank must load into the same model");
  TORCH_CHECK(!options.strict() || decision.problems.ok(), "fsdp: ",
              decision.problems.message(std::string(api) + " (strict): the state dict", "the state dict"),
              "\nPass LoadStateDictOptions().strict(false) to load the tensors that match.");
  return decision;
}

}  // namespace fsdp::detail
