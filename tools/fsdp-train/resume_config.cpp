#include "resume_config.h"

#include <fmt/format.h>

#include <functional>

namespace fsdp_train {
namespace {

// One option a checkpoint records. `must_match`: a different explicit value
// would not continue the same model, so it is an error.
struct Recorded {
  const char* name;
  bool must_match;
  std::function<nlohmann::json(const TrainOptions&)> get;
  std::function<void(TrainOptions&, const nlohmann::json&)> set;
};

#define FSDP_TRAIN_RECORDED(flag, field, must_match)                                      \
  Recorded {                                                                              \
    flag, must_match, [](const TrainOptions& o) { return nlohmann::json(o.field); },      \
        [](TrainOptions& o, const nlohmann::json& j) { j.get_to(o.field); }               \
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

}  // namespace

nlohmann::json checkpoint_extras(const TrainOptions& options, const ByteCorpus& corpus,
                                 int world_size) {
  nlohmann::json recorded = nlohmann::json::object();
  for (const auto& r : recorded_options()) recorded[r.name] = r.get(options);
  return {{"trainer", "fsdp-train"},
          {"options", recorded},
          {"world_size", world_size},
          {"corpus", {{"source", corpus.source},
                      {"bytes", corpus.total_bytes()},
                      {"checksum", fmt::format("{:016x}", corpus.checksum)}}}};
}

std::vector<std::string> adopt_checkpoint_options(TrainOptions& options,
                                                  const nlohmann::json& extras,
                                                  const std::string& checkpoint_dir) {
  std::vector<std::string> errors;
  if (!extras.is_object() || extras.value("trainer", "") != "fsdp-train" ||
      !extras.contains("options")) {
    errors.push_back(fmt::format(
        "--resume '{}' was not written by fsdp-train (its extras hold no fsdp-train options); "
        "resume from a checkpoint of an fsdp-train run",
        checkpoint_dir));
    return errors;
  }
  const nlohmann::json& saved = extras.at("options");
  for (const auto& r : recorded_options()) {
    if (!saved.contains(r.name)) continue;
    const nlohmann::json& value = saved.at(r.name);
    if (!options.was_given(r.name)) {
      try {
        r.set(options, value);
      } catch (const nlohmann::json::exception& e) {
        errors.push_back(fmt::format("--resume '{}': its recorded --{} ({}) is malformed: {}",
                                     checkpoint_dir, r.name, value.dump(), e.what()));
      }
    } else if (r.must_match && r.get(options) != value) {
      errors.push_back(fmt::format(
          "--{} {} differs from the checkpoint's {} ('{}' was trained with --{} {}); leave --{} "
          "out to use the checkpoint's value",
          r.name, r.get(options).dump(), value.dump(), checkpoint_dir, r.name, value.dump(),
          r.name));
    }
  }
  return errors;
}

std::string corpus_mismatch_warning(const ByteCorpus& corpus, const nlohmann::json& extras) {
  if (!extras.contains("corpus")) return "";
  const std::string saved = extras["corpus"].value("checksum", "");
  const std::string now = fmt::format("{:016x}", corpus.checksum);
  if (saved == now) return "";
  return fmt::format(
      "warning: the data differs from the checkpoint's ({} bytes, checksum {}; now {} bytes, "
      "checksum {}): training continues on different bytes than it started on",
      extras["corpus"].value("bytes", int64_t{0}), saved, corpus.total_bytes(), now);
}

}  // namespace fsdp_train
