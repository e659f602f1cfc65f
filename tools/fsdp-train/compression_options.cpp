// fsdp-train's compression options: --compress-weights, --compress-grads,
// --compress-scope and --compress-block-size, checked and turned into
// fsdp::CommCompression (docs/compressed-communication.md).

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "train_options.h"

namespace fsdp_train {

// The compression options, and that they fit the strategy.
void validate_compression(const TrainOptions& o, std::vector<std::string>& errors) {
  for (const auto& [flag, value] : {std::pair{"--compress-weights", o.compress_weights},
                                     std::pair{"--compress-grads", o.compress_grads}}) {
    if (!wire_format(value)) {
      errors.push_back(fmt::format("{} '{}' is not one of: none, bf16, int8", flag, value));
    }
  }
  if (o.compress_block_size < 1) {
    errors.push_back(fmt::format("--compress-block-size is {}; give at least 1 value per scale "
                                 "(256 is the default)", o.compress_block_size));
  }
  if (o.compress_scope != "all" && o.compress_scope != "inter-node") {
    errors.push_back(fmt::format("--compress-scope '{}' is not one of: all, inter-node",
                                 o.compress_scope));
  } else if (o.compress_scope == "inter-node" && o.strategy != "hybrid") {
    errors.push_back(fmt::format("--compress-scope inter-node needs --strategy hybrid (got '{}'): "
                                 "only a hybrid mesh keeps inter-node traffic in collectives of "
                                 "its own; with the others every ring crosses the nodes",
                                 o.strategy));
  } else if (o.compress_scope == "inter-node" && o.compress_weights != "none") {
    errors.push_back(fmt::format("--compress-weights {} has no effect with --compress-scope "
                                 "inter-node: a hybrid mesh gathers parameters within a node only; "
                                 "drop one of them",
                                 o.compress_weights));
  }
}

std::optional<fsdp::WireFormat> wire_format(const std::string& name) {
  if (name == "none") return fsdp::WireFormat::kAsIs;
  if (name == "bf16") return fsdp::WireFormat::kBf16;
  if (name == "int8") return fsdp::WireFormat::kInt8;
  return std::nullopt;
}

fsdp::CommCompression comm_compression(const TrainOptions& o) {
  const auto as = [&](const std::string& name) {
    return fsdp::Compression().format(*wire_format(name)).block_size(o.compress_block_size);
  };
  // --compress-grads covers every gradient reduction: the reduce-scatter,
  // and the all-reduce across replicas (--strategy none, hybrid), or only
  // the latter with --compress-scope inter-node (where weights travel
  // within a node only, so they are not compressed).
  if (o.compress_scope == "inter-node") {
    return fsdp::CommCompression().replicate_grads(as(o.compress_grads));
  }
  return fsdp::CommCompression()
      .weights(as(o.compress_weights))
      .grads(as(o.compress_grads))
      .replicate_grads(as(o.compress_grads));
}

}  // namespace fsdp_train
