#include <c10/util/Exception.h>

#include "checkpoint/even_split_writer.h"
#include "checkpoint/index.h"
#include "checkpoint/output_outside_input.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/reader.h"

namespace fsdp::ckpt {

void reshard(const std::string& dir, int world_size, const std::string& out, bool overwrite) {
  TORCH_CHECK(world_size >= 1, "fsdp: reshard: world size must be >= 1, got ", world_size);
  detail::check_output_outside_input(dir, out, "reshard");
  const Reader reader = Reader::open(dir);
  const Index& source = reader.index();

  Index index;
  index.world_size = world_size;
  index.step = source.step;
  index.extras_json = source.extras_json;
  index.params_with_optimizer_state = source.params_with_optimizer_state;
  index.checksum_block_bytes = source.checksum_block_bytes;
  for (const auto& t : source.tensors) index.tensors.push_back({t.name, t.shape, t.dtype, {}});
  detail::write_even_split(
      std::move(index),
      [&](size_t t, int64_t flat_begin, int64_t numel) {
        return reader.read(source.tensors[t].name, flat_begin, numel);
      },
      out, overwrite);
}

}  // namespace fsdp::ckpt
