#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <charconv>

#include "checkpoint/even_split_writer.h"
#include "checkpoint/index.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/checkpoint/save.h"
#include "json/json_io.h"

namespace fsdp::ckpt {

namespace {

// __metadata__'s "libfsdp_step" (what consolidate writes), else 0.
int64_t recorded_step(const std::string& file, const safetensors::Header& header) {
  const auto it = header.metadata.find("libfsdp_step");
  if (it == header.metadata.end()) return 0;
  const std::string& text = it->second;
  int64_t step = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), step);
  TORCH_CHECK(error == std::errc() && end == text.data() + text.size() && step >= 0,
              "fsdp: import: '", file,
              "': __metadata__ libfsdp_step must be a step number (an integer >= 0), got '", text,
              "'");
  return step;
}

// __metadata__'s "libfsdp_extras", checked to be one JSON object, else "{}".
std::string recorded_extras(const std::string& file, const safetensors::Header& header) {
  const auto it = header.metadata.find("libfsdp_extras");
  if (it == header.metadata.end()) return "{}";
  json::Document extras;
  const std::string error = json::parse_error(it->second, &extras);
  TORCH_CHECK(error.empty() && extras.IsObject(), "fsdp: import: '", file,
              "': __metadata__ libfsdp_extras must be the text of a JSON object; got ",
              error.empty() ? json::kind_name(extras) : "invalid JSON (" + error + ")", ": ",
              it->second.substr(0, 200));
  return json::to_text(extras);
}

}  // namespace

void import_safetensors(const std::string& file, int world_size, const std::string& out,
                        bool overwrite) {
  TORCH_CHECK(world_size >= 1, "fsdp: import: world size must be >= 1, got ", world_size);
  const safetensors::Header header = safetensors::read_header(file);
  Index index;
  index.world_size = world_size;
  index.step = recorded_step(file, header);
  index.extras_json = recorded_extras(file, header);
  index.checksum_block_bytes = kDefaultChecksumBlockBytes;
  for (const auto& e : header.entries)
    index.tensors.push_back({e.key, e.shape, safetensors::dtype_from_name(e.dtype), {}});
  index.params_with_optimizer_state = params_with_optimizer_entries(index.tensors);

  // Each tensor is read whole once, when its first piece is wanted.
  size_t cached_index = header.entries.size();
  at::Tensor cached;
  detail::write_even_split(
      std::move(index),
      [&](size_t t, int64_t flat_begin, int64_t numel) {
        if (t != cached_index) {
          cached = safetensors::read_entry(file, header, header.entries[t]).reshape({-1});
          cached_index = t;
        }
        return cached.narrow(0, flat_begin, numel);
      },
      out, overwrite);
}

}  // namespace fsdp::ckpt
