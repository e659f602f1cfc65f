#include "metrics_log.h"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

namespace fsdp_train {

nlohmann::json StepRecord::to_json() const {
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"tokens_per_s", tokens_per_s},
                      {"ms", ms},
                      {"elapsed_s", elapsed_s},
                      {"sharded_param_bytes", sharded_param_bytes},
                      {"peak_gathered_param_bytes", peak_gathered_param_bytes}};
  if (val_loss) j["val_loss"] = *val_loss;
  return j;
}

StepRecord StepRecord::from_json(const nlohmann::json& j) {
  StepRecord r;
  r.step = j.at("step").get<int64_t>();
  r.loss = j.at("loss").get<double>();
  r.lr = j.value("lr", 0.0);
  r.grad_norm = j.value("grad_norm", 0.0);
  r.tokens_per_s = j.value("tokens_per_s", 0.0);
  r.ms = j.value("ms", 0.0);
  r.elapsed_s = j.value("elapsed_s", 0.0);
  r.sharded_param_bytes = j.value("sharded_param_bytes", std::vector<int64_t>{});
  r.peak_gathered_param_bytes = j.value("peak_gathered_param_bytes", std::vector<int64_t>{});
  if (j.contains("val_loss")) r.val_loss = j.at("val_loss").get<double>();
  return r;
}

MetricsLog::MetricsLog(const std::string& run_dir, int64_t resumed_step)
    : path_((std::filesystem::path(run_dir) / "metrics.jsonl").string()) {
  if (resumed_step > 0) {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.contains("step")) continue;  // a line cut by a kill
      StepRecord r = StepRecord::from_json(j);
      if (r.step <= resumed_step) records_.push_back(std::move(r));
    }
  }
  out_.open(path_, std::ios::trunc);
  if (!out_) throw std::runtime_error(fmt::format("cannot write '{}'", path_));
  for (const auto& r : records_) out_ << r.to_json().dump() << '\n';
  out_.flush();
}

void MetricsLog::append(const StepRecord& record) {
  records_.push_back(record);
  out_ << record.to_json().dump() << '\n';
  out_.flush();
}

}  // namespace fsdp_train
