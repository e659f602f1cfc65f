#include "checkpoint/even_split_writer.h"

#include <c10/util/Exception.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "checkpoint/rank_file.h"
#include "checkpoint/staging.h"
#include "fsdp/file_tree.h"

namespace fsdp::ckpt::detail {

namespace fs = std::filesystem;

namespace {

using RankSpecs = std::vector<std::vector<PieceSpec>>;  // [rank] -> its pieces, in tensor order

// Even flat splits: rank r holds [r*c, min((r+1)*c, n)), c = ceil(n / world_size).
RankSpecs even_split(const Index& index) {
  const int world_size = index.world_size;
  RankSpecs specs(static_cast<size_t>(world_size));
  for (const auto& t : index.tensors) {
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

// Writes every rank's file into `staging`, tensor by tensor, and records the
// files and pieces in `index`.
void write_rank_files(const ReadElements& read, const RankSpecs& specs, const std::string& staging,
                      Index* index) {
  const int world_size = static_cast<int>(specs.size());
  std::vector<std::unique_ptr<RankFileWriter>> writers(specs.size());
  for (int r = 0; r < world_size; ++r)
    if (!specs[r].empty())
      writers[r] = std::make_unique<RankFileWriter>(
          (fs::path(staging) / rank_file_name(r, world_size)).string(), r, world_size, specs[r],
          index->checksum_block_bytes);
  std::vector<size_t> next(specs.size(), 0);
  for (size_t t = 0; t < index->tensors.size(); ++t) {
    const std::string& name = index->tensors[t].name;
    for (int r = 0; r < world_size; ++r) {
      if (next[r] >= specs[r].size() || specs[r][next[r]].name != name) continue;
      const auto& spec = specs[r][next[r]++];
      writers[r]->write_next(read(t, spec.flat_begin, spec.numel));
    }
  }
  for (int r = 0; r < world_size; ++r) {
    if (!writers[r]) continue;
    const int file_index = static_cast<int>(index->files.size());
    const int64_t bytes = writers[r]->finish();
    index->files.push_back(
        {rank_file_name(r, world_size), r, bytes, writers[r]->header_checksum()});
    for (size_t i = 0; i < specs[r].size(); ++i) {
      PieceInfo piece = writers[r]->pieces()[i];
      piece.file = file_index;
      index->tensors[static_cast<size_t>(index->find(specs[r][i].name))].pieces.push_back(
          std::move(piece));
    }
  }
  // Files were added in rank order, so each tensor's pieces are already sorted.
}

}  // namespace

void write_even_split(Index index, const ReadElements& read, const std::string& out,
                      bool overwrite) {
  TORCH_CHECK(index.world_size >= 1, "fsdp: a checkpoint needs a world size >= 1, got ",
              index.world_size);
  check_target(out, overwrite);
  const std::string staging = staging_path(out, new_staging_id());
  create_staging(staging);
  try {
    write_rank_files(read, even_split(index), staging, &index);
    publish_checkpoint(staging, index, out, overwrite);
  } catch (const std::exception&) {
    remove_tree(staging);
    throw;
  }
}

}  // namespace fsdp::ckpt::detail
