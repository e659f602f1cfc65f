#include "state_dict/load_decision.h"

#include <c10/util/Exception.h>

#include "json/json_io.h"
#include "state_dict/unit_gather.h"

namespace fsdp::detail {

std::string LoadDecision::encode() const {
  json::Writer w;
  w.begin_object().key("plan").begin_array();
  for (const auto& entry : plan) {
    w.begin_object().member("load", entry.load);
    w.key("fields").array(entry.fields);
    w.member("step", entry.step).end_object();
  }
  w.end_array();
  w.key("missing").array(problems.missing);
  w.key("unexpected").array(problems.unexpected);
  w.key("mismatched").array(problems.mismatched);
  return w.end_object().text();
}

LoadDecision LoadDecision::decode(const std::string& text) {
  const std::string source = "the load decision sent by rank 0 (internal error) " + text.substr(0, 200);
  const json::Document j = json::parse(text, source);
  LoadDecision decision;
  for (const auto& entry : json::array_field(j, "plan", source).GetArray()) {
    decision.plan.push_back({json::bool_field(entry, "load", source),
                             json::string_array_field(entry, "fields", source),
                             json::int64_field(entry, "step", source)});
  }
  decision.problems.missing = json::string_array_field(j, "missing", source);
  decision.problems.unexpected = json::string_array_field(j, "unexpected", source);
  decision.problems.mismatched = json::string_array_field(j, "mismatched", source);
  return decision;
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
