#include "resume_config.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <functional>

namespace fsdp_train {
namespace {

// Checkpoint extras are JSON text (fsdp::ckpt::SaveOptions::extras_json),
// written and read here with RapidJSON, not the JSON library LibTorch 2.10+
// carries: see [Note: no JSON symbols shared with LibTorch] in
// src/json/json_io.h.
using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void write_value(JsonWriter& w, int64_t v) { w.Int64(v); }
void write_value(JsonWriter& w, uint64_t v) { w.Uint64(v); }
void write_value(JsonWriter& w, double v) { w.Double(v); }
void write_value(JsonWriter& w, const std::string& v) {
  w.String(v.data(), static_cast<rapidjson::SizeType>(v.size()));
}

template <class T>
std::string json_text(const T& v) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  write_value(w, v);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string json_text(const rapidjson::Value& v) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  v.Accept(w);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// Each reads `j` into `out`, or returns false if `j` has another type.
bool read_value(const rapidjson::Value& j, int64_t* out) { return j.IsInt64() && (*out = j.GetInt64(), true); }
bool read_value(const rapidjson::Value& j, uint64_t* out) { return j.IsUint64() && (*out = j.GetUint64(), true); }
bool read_value(const rapidjson::Value& j, double* out) { return j.IsNumber() && (*out = j.GetDouble(), true); }
bool read_value(const rapidjson::Value& j, std::string* out) {
  return j.IsString() && (*out = std::string(j.GetString(), j.GetStringLength()), true);
}

// One option a checkpoint records. `must_match`: a different explicit value
// would not continue the same model, so it is an error.
struct Recorded {
  const char* name;
  bool must_match;
  std::function<std::string(const TrainOptions&)> get;           // as JSON text
  std::function<bool(TrainOptions&, const rapidjson::Value&)> set;  // false: the wrong type
};

#define FSDP_TRAIN_RECORDED(flag, field, must_match)                                           \
  Recorded {                                                                                   \
    flag, must_match, [](const TrainOptions& o) { return json_text(o.field); },                \
        [](TrainOptions& o, const rapidjson::Value& j) { return read_value(j, &o.field); }    \
  }

const std::vector<Recorded>& recorded_options() {
  static const std::vector<Recorded> all = {
      FSDP_TRAIN_RECORDED("layers", layers, true),
      FSDP_TRAIN_RECORDED("width", width, true),
      FSDP_TRAIN_RECORDED("heads", heads, true),
      FSDP_TRAIN_RECORDED("context", context, true),
      FSDP_TRAIN_RECORDED("data", data, false),
      FSDP_TRAIN_RECORDED("batch", batch, false),
      FSDP_TRAIN_RECORDED("seed", seed, false),
      FSDP_TRAIN_RECORDED("steps", steps, false),
      FSDP_TRAIN_RECORDED("lr", lr, false),
      FSDP_TRAIN_RECORDED("min-lr", min_lr, false),
      FSDP_TRAIN_RECORDED("warmup", warmup, false),
      FSDP_TRAIN_RECORDED("weight-decay", weight_decay, false),
      FSDP_TRAIN_RECORDED("clip", clip, false),
  };
  return all;
}

#undef FSDP_TRAIN_RECORDED

// Whether checkpoint extras are fsdp-train's: they record the run's options.
bool written_by_fsdp_train(const rapidjson::Document& extras) {
  return !extras.HasParseError() && extras.IsObject() && extras.HasMember("trainer") &&
         extras["trainer"].IsString() &&
         std::string(extras["trainer"].GetString()) == "fsdp-train" &&
         extras.HasMember("options") && extras["options"].IsObject();
}

}  // namespace

std::string checkpoint_extras(const TrainOptions& options, const ByteCorpus& corpus, int world_size) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("trainer");
  w.String("fsdp-train");
  w.Key("options");
  w.StartObject();
  for (const auto& r : recorded_options()) {
    w.Key(r.name);
    const std::string text = r.get(options);
    w.RawValue(text.data(), text.size(), rapidjson::kNumberType);
  }
  w.EndObject();
  w.Key("world_size");
  w.Int(world_size);
  w.Key("corpus");
  w.StartObject();
  w.Key("source");
  write_value(w, corpus.source);
  w.Key("bytes");
  write_value(w, static_cast<int64_t>(corpus.total_bytes()));
  w.Key("checksum");
  write_value(w, fmt::format("{:016x}", corpus.checksum));
  w.EndObject();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::vector<std::string> adopt_checkpoint_options(TrainOptions& options, const std::string& extras_json,
                                                  const std::string& checkpoint_dir) {
  std::vector<std::string> errors;
  rapidjson::Document extras;
  extras.Parse<rapidjson::kParseFullPrecisionFlag>(extras_json.data(), extras_json.size());
  if (!written_by_fsdp_train(extras)) return errors;  // see resume_warning()
  const rapidjson::Value& saved = extras["options"];
  for (const auto& r : recorded_options()) {
    if (!saved.HasMember(r.name)) continue;
    const rapidjson::Value& value = saved[r.name];
    if (!options.was_given(r.name)) {
      if (!r.set(options, value)) {
        errors.push_back(fmt::format("--resume '{}': its recorded --{} ({}) is malformed: it has the wrong type",
                                     checkpoint_dir, r.name, json_text(value)));
      }
    } else if (r.must_match && r.get(options) != json_text(value)) {
      errors.push_back(fmt::format(
          "--{} {} differs from the checkpoint's {} ('{}' was trained with --{} {}); leave --{} "
          "out to use the checkpoint's value",
          r.name, r.get(options), json_text(value), checkpoint_dir, r.name, json_text(value), r.name));
    }
  }
  return errors;
}

std::string resume_warning(const ByteCorpus& corpus, const std::string& extras_json,
                           const std::string& checkpoint_dir) {
  rapidjson::Document extras;
  extras.Parse<rapidjson::kParseFullPrecisionFlag>(extras_json.data(), extras_json.size());
  if (!written_by_fsdp_train(extras)) {
    return fmt::format(
        "note: '{}' was not written by fsdp-train (an import, e.g. fsdp-ckpt import-dcp?): the "
        "run's "
        "options come from the command line alone, so give the model shape, --batch, --steps and "
        "schedule it was trained with; training continues after its step",
        checkpoint_dir);
  }
  if (!extras.HasMember("corpus") || !extras["corpus"].IsObject()) return "";
  const rapidjson::Value& recorded = extras["corpus"];
  std::string saved;
  int64_t saved_bytes = 0;
  if (recorded.HasMember("checksum")) read_value(recorded["checksum"], &saved);
  if (recorded.HasMember("bytes")) read_value(recorded["bytes"], &saved_bytes);
  const std::string now = fmt::format("{:016x}", corpus.checksum);
  if (saved == now) return "";
  return fmt::format(
      "warning: the data differs from the checkpoint's ({} bytes, checksum {}; now {} bytes, "
      "checksum {}): training continues on different bytes than it started on",
      saved_bytes, saved, corpus.total_bytes(), now);
}

}  // namespace fsdp_train
