#include "checkpoint/verdict.h"

#include <c10/util/Exception.h>

#include "fsdp/comm/process_group.h"
#include "json/json_io.h"

namespace fsdp::ckpt::detail {

Verdict Verdict::success(std::string result) { return Verdict{true, {}, std::move(result)}; }

Verdict Verdict::failure(std::string message) { return Verdict{false, std::move(message), {}}; }

std::string Verdict::encode() const {
  json::Writer w;
  w.begin_object().member("ok", ok).member("message", message).member("result", result).end_object();
  return w.text();
}

Verdict Verdict::decode(const std::string& text) {
  const std::string source = "a checkpoint verdict sent by a rank (internal error) " + text.substr(0, 200);
  const json::Document j = json::parse(text, source);
  return Verdict{json::bool_field(j, "ok", source), json::string_field(j, "message", source),
                 json::string_field(j, "result", source)};
}

std::vector<Verdict> all_gather_verdicts(ProcessGroup& group, const Verdict& mine) {
  std::vector<Verdict> verdicts;
  for (const auto& text : all_gather_strings(group, mine.encode())) verdicts.push_back(Verdict::decode(text));
  return verdicts;
}

}  // namespace fsdp::ckpt::detail
