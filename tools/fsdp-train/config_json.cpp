#include "config_json.h"

#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <filesystem>

#include "output_file.h"
#include "resume_config.h"

namespace fsdp_train {

// What the checkpoint records, plus what this run chose beyond it.
void write_config_json(const TrainSetup& setup, int world_size, int64_t start_step,
                       const std::string& run_dir) {
  const TrainOptions& o = setup.options;
  // RapidJSON: see [Note: no JSON symbols shared with LibTorch] in src/json/json_io.h.
  rapidjson::Document config;
  const std::string extras = checkpoint_extras(o, setup.corpus, world_size);
  config.Parse<rapidjson::kParseFullPrecisionFlag>(extras.data(), extras.size());
  auto& a = config.GetAllocator();
  const auto add_text = [&](const char* key, const std::string& s) {
    rapidjson::Value value(s.data(), static_cast<rapidjson::SizeType>(s.size()), a);
    config.AddMember(rapidjson::StringRef(key), value, a);
  };
  add_text("strategy", o.strategy);
  add_text("mixed_precision", o.mixed_precision);
  config.AddMember("offload", o.offload, a);
  config.AddMember("prefetch", !o.no_prefetch, a);
  add_text("activation_checkpointing", o.activation_checkpointing);
  add_text("compress_weights", o.compress_weights);
  add_text("compress_grads", o.compress_grads);
  add_text("compress_scope", o.compress_scope);
  config.AddMember("compress_block_size", o.compress_block_size, a);
  config.AddMember("micro_batch", static_cast<int64_t>(setup.layout.micro_batch), a);
  config.AddMember("grad_accum", static_cast<int64_t>(setup.layout.grad_accum), a);
  add_text("launcher", setup.launcher);
  add_text("resume", setup.resume_dir);
  config.AddMember("start_step", static_cast<int64_t>(start_step), a);
  rapidjson::StringBuffer buffer;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> writer(buffer);
  writer.SetIndent(' ', 2);
  config.Accept(writer);
  write_output_file((std::filesystem::path(run_dir) / "config.json").string(),
                    std::string(buffer.GetString(), buffer.GetSize()) + "\n");
}

}  // namespace fsdp_train
