#include "metrics_log.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "output_file.h"

namespace fsdp_train {

// Written and read with RapidJSON, not the JSON library LibTorch 2.10+
// carries: see [Note: no JSON symbols shared with LibTorch] in
// src/json/json_io.h.
std::string StepRecord::to_json_line() const {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  const auto number = [&](const char* key, double v) {
    w.Key(key);
    if (std::isfinite(v)) {
      w.Double(v);  // shortest text that reads back to the same double
    } else {
      w.Null();
    }
  };
  const auto integers = [&](const char* key, const std::vector<int64_t>& values) {
    w.Key(key);
    w.StartArray();
    for (int64_t v : values) w.Int64(v);
    w.EndArray();
  };
  w.StartObject();
  w.Key("step");
  w.Int64(step);
  number("loss", loss);
  number("lr", lr);
  number("grad_norm", grad_norm);
  number("tokens_per_s", tokens_per_s);
  number("ms", ms);
  number("elapsed_s", elapsed_s);
  integers("sharded_param_bytes", sharded_param_bytes);
  integers("peak_gathered_param_bytes", peak_gathered_param_bytes);
  integers("peak_tensor_bytes", peak_tensor_bytes);
  integers("peak_resident_bytes", peak_resident_bytes);
  if (!peak_device_allocated_bytes.empty()) {
    integers("peak_device_allocated_bytes", peak_device_allocated_bytes);
    integers("peak_device_reserved_bytes", peak_device_reserved_bytes);
  }
  if (!hook_us.empty()) {
    integers("hook_us", hook_us);
    w.Key("hook_us_by_range");
    w.StartObject();
    for (const auto& [range, us] : hook_us_by_range) number(range.c_str(), us);
    w.EndObject();
  }
  if (val_loss) number("val_loss", *val_loss);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::optional<StepRecord> StepRecord::from_json_line(const std::string& line) {
  rapidjson::Document j;
  j.Parse<rapidjson::kParseFullPrecisionFlag>(line.data(), line.size());
  if (j.HasParseError() || !j.IsObject() || !j.HasMember("step") || !j["step"].IsInt64() ||
      !j.HasMember("loss") || !j["loss"].IsNumber())
    return std::nullopt;
  const auto number = [&](const char* key) {
    auto it = j.FindMember(key);
    return it != j.MemberEnd() && it->value.IsNumber() ? it->value.GetDouble() : 0.0;
  };
  const auto integers = [&](const char* key) {
    std::vector<int64_t> out;
    auto it = j.FindMember(key);
    if (it == j.MemberEnd() || !it->value.IsArray()) return out;
    for (const auto& v : it->value.GetArray())
      if (v.IsInt64()) out.push_back(v.GetInt64());
    return out;
  };
  StepRecord r;
  r.step = j["step"].GetInt64();
  r.loss = j["loss"].GetDouble();
  r.lr = number("lr");
  r.grad_norm = number("grad_norm");
  r.tokens_per_s = number("tokens_per_s");
  r.ms = number("ms");
  r.elapsed_s = number("elapsed_s");
  r.sharded_param_bytes = integers("sharded_param_bytes");
  r.peak_gathered_param_bytes = integers("peak_gathered_param_bytes");
  r.peak_tensor_bytes = integers("peak_tensor_bytes");
  r.peak_resident_bytes = integers("peak_resident_bytes");
  r.peak_device_allocated_bytes = integers("peak_device_allocated_bytes");
  r.peak_device_reserved_bytes = integers("peak_device_reserved_bytes");
  r.hook_us = integers("hook_us");
  if (auto it = j.FindMember("hook_us_by_range"); it != j.MemberEnd() && it->value.IsObject()) {
    for (const auto& m : it->value.GetObject()) {
      if (m.value.IsNumber()) r.hook_us_by_range.emplace_back(m.name.GetString(), m.value.GetDouble());
    }
  }
  if (j.HasMember("val_loss") && j["val_loss"].IsNumber()) r.val_loss = j["val_loss"].GetDouble();
  return r;
}

std::string RestartMarker::to_json_line() const {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("restart");
  w.Int(restart);
  w.Key("after_step");
  w.Int64(after_step);
  w.Key("redone_steps");
  w.Int64(redone_steps);
  w.Key("redone_s");
  w.Double(redone_s);
  w.Key("total_redone_steps");
  w.Int64(total_redone_steps);
  w.Key("total_redone_s");
  w.Double(total_redone_s);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::optional<RestartMarker> RestartMarker::from_json_line(const std::string& line) {
  rapidjson::Document j;
  j.Parse<rapidjson::kParseFullPrecisionFlag>(line.data(), line.size());
  if (j.HasParseError() || !j.IsObject()) return std::nullopt;
  for (const char* key : {"restart", "after_step", "redone_steps", "total_redone_steps"}) {
    if (!j.HasMember(key) || !j[key].IsInt64()) return std::nullopt;
  }
  for (const char* key : {"redone_s", "total_redone_s"}) {
    if (!j.HasMember(key) || !j[key].IsNumber()) return std::nullopt;
  }
  RestartMarker m;
  m.restart = static_cast<int>(j["restart"].GetInt64());
  m.after_step = j["after_step"].GetInt64();
  m.redone_steps = j["redone_steps"].GetInt64();
  m.redone_s = j["redone_s"].GetDouble();
  m.total_redone_steps = j["total_redone_steps"].GetInt64();
  m.total_redone_s = j["total_redone_s"].GetDouble();
  return m;
}

std::string RestartMarker::summary() const {
  return fmt::format("{} (redone {} step{}, {:.1f} s)", restart, total_redone_steps,
                     total_redone_steps == 1 ? "" : "s", total_redone_s);
}

// [Note: redone work across restarts]
// A restarted start resumes from its newest checkpoint, so every step
// recorded after that checkpoint is done again: it drops those lines (the
// curve must show each step once) and counts them, with their time, in its
// marker. A restart can resume from further back than the one before it
// (its newer checkpoint did not verify, or it starts afresh), and then it
// drops an earlier restart's marker with the steps around it. The totals
// must still count that restart, so each marker carries the totals so far,
// and a new marker adds its own work to the newest marker read from the
// file, kept or dropped; never to a sum of the kept markers alone.
MetricsLog::MetricsLog(const std::string& run_dir, int64_t resumed_step, int restart_count)
    : path_((std::filesystem::path(run_dir) / "metrics.jsonl").string()) {
  RestartMarker marker;
  marker.restart = restart_count;
  marker.after_step = resumed_step;
  std::vector<std::string> kept;
  if (resumed_step > 0 || restart_count > 0) kept = read_previous(resumed_step, marker);
  out_.emplace(path_);
  for (const std::string& line : kept) out_->append_line(line);
  if (restart_count > 0) {
    marker.total_redone_steps += marker.redone_steps;
    marker.total_redone_s += marker.redone_s;
    out_->append_line(marker.to_json_line());
    restarts_.push_back(marker);
  }
}

std::vector<std::string> MetricsLog::read_previous(int64_t resumed_step, RestartMarker& dropped) {
  std::vector<std::string> kept;
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (std::optional<StepRecord> r = StepRecord::from_json_line(line)) {
      if (r->step <= resumed_step) {
        records_.push_back(std::move(*r));
        kept.push_back(line);
      } else {
        dropped.redone_steps += 1;
        dropped.redone_s += r->ms / 1000.0;
      }
    } else if (std::optional<RestartMarker> m = RestartMarker::from_json_line(line)) {
      dropped.total_redone_steps = m->total_redone_steps;  // see the Note
      dropped.total_redone_s = m->total_redone_s;
      if (m->after_step <= resumed_step) {
        restarts_.push_back(*m);
        kept.push_back(line);
      }
    }  // else a line cut by a kill
  }
  return kept;
}

// See [Note: a failed write is an error] and [Note: a metrics line is written whole or not
// at all] in output_file.h.
void MetricsLog::append(const StepRecord& record) {
  out_->append_line(record.to_json_line());
  records_.push_back(record);
}

}  // namespace fsdp_train
