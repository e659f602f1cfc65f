#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <filesystem>
#include <memory>

#include "checkpoint/index.h"
#include "checkpoint/output_outside_input.h"
#include "checkpoint/rank_file.h"
#include "checkpoint/staging.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/reader.h"

namespace fsdp::ckpt {

namespace fs = std::filesystem;

namespace {

using RankSpecs = std::vector<std::vector<detail::PieceSpec>>;  // [rank] -> its pieces, in tensor order

// Even flat splits: rank r holds [r*c, min((r+1)*c, n)), c = ceil(n / world_size).
RankSpecs even_split(const Index& source, int world_size) {
  RankSpecs specs(static_cast<size_t>(world_size));
  for (const auto& t : source.tensors) {
    const int64_t n = t.numel();
    const int64_t chunk = (n + world_size - 1) / world_size;
    for (int r = 0; r < world_size; ++r) {
      const int64_t begin = std::min(n, r * chunk);
      const int64_t end = std::min(n, begin + chunk);
      if (end > begin) specs[r].push_back({t.name, t.dtype, begin, end - begin});
    }
  }
  return specs;
}

// Writes every rank's file into `staging`, tensor by tensor, each piece
// read straight from `reader`, and records the files and pieces in `index`
// (whose tensors are the source's, in its order).
void write_rank_files(const Reader& reader, const RankSpecs& specs, const std::string& staging, Index* index) {
  const Index& source = reader.index();
  const int world_size = static_cast<int>(specs.size());
  std::vector<std::unique_ptr<detail::RankFileWriter>> writers(specs.size());
  for (int r = 0; r < world_size; ++r)
    if (!specs[r].empty())
      writers[r] = std::make_unique<detail::RankFileWriter>(
          (fs::path(staging) / rank_file_name(r, world_size)).string(), r, world_size, specs[r],
          index->checksum_block_bytes);
  std::vector<size_t> next(specs.size(), 0);
  for (const auto& t : source.tensors) {
    for (int r = 0; r < world_size; ++r) {
      if (next[r] >= specs[r].size() || specs[r][next[r]].name != t.name) continue;
      const auto& spec = specs[r][next[r]++];
      writers[r]->write_next(reader.read(t.name, spec.flat_begin, spec.numel));
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (!writers[r]) continue;
    const int file_index = static_cast<int>(index->files.size());
    const int64_t bytes = writers[r]->finish();
    index->files.push_back({rank_file_name(r, world_size), r, bytes, writers[r]->header_checksum()});
    for (size_t i = 0; i < specs[r].size(); ++i) {
      PieceInfo piece = writers[r]->pieces()[i];
      piece.file = file_index;
      index->tensors[static_cast<size_t>(source.find(specs[r][i].name))].pieces.push_back(std::move(piece));
    }
  }
  // Files were added in rank order, so each tensor's pieces are already sorted.
}

}  // namespace

void reshard(const std::string& dir, int world_size, const std::string& out, bool overwrite) {
  TORCH_CHECK(world_size >= 1, "fsdp: reshard: world size must be >= 1, got ", world_size);
  detail::check_output_outside_input(dir, out, "reshard");
  const Reader reader = Reader::open(dir);
  const Index& source = reader.index();
  detail::check_target(out, overwrite);

  Index index;
  index.world_size = world_size;
  index.step = source.step;
  index.extras_json = source.extras_json;
  index.params_with_optimizer_state = source.params_with_optimizer_state;
  index.checksum_block_bytes = source.checksum_block_bytes;
  for (const auto& t : source.tensors) index.tensors.push_back({t.name, t.shape, t.dtype, {}});

  const std::string staging = detail::staging_path(out, detail::new_staging_id());
  detail::create_staging(staging);
  try {
    write_rank_files(reader, even_split(source, world_size), staging, &index);
    detail::publish_checkpoint(staging, index, out, overwrite);
  } catch (const std::exception& e) {
    detail::remove_quietly(staging);
    throw;
  }
}

}  // namespace fsdp::ckpt
