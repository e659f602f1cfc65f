#include "sample_file.h"

#include <fmt/format.h>

#include <filesystem>

#include "generate.h"
#include "output_file.h"

namespace fsdp_train {

std::string generate_sample(fsdp::Sharded<fsdp::models::GPT>& model, const TrainOptions& options,
                            c10::Device device) {
  GenerateOptions g;
  g.prompt = options.prompt;
  g.bytes = options.sample_bytes;
  g.temperature = options.temperature;
  g.seed = options.seed;
  g.context = options.context;
  g.device = device;
  return generate(model, g);
}

std::string write_sample(const std::string& run_dir, const TrainOptions& options,
                         const std::string& sample) {
  const std::string file = (std::filesystem::path(run_dir) / "sample.txt").string();
  write_output_file(file, options.prompt + sample);
  if (!options.quiet) {
    fmt::print("\nSample ({} bytes after the prompt, temperature {:g}):\n", sample.size(),
               options.temperature);
    fmt::print("------------------------------------------------------------------------\n");
    fmt::print("{}{}\n", printable(options.prompt), printable(sample));
    fmt::print("------------------------------------------------------------------------\n");
  }
  return file;
}

}  // namespace fsdp_train
