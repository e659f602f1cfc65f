#pragma once
// One rank's data file: a safetensors file holding that rank's pieces as 1-D
// entries keyed "<name>@<flat_begin>", with block checksums computed while
// writing. Used by the collective save (one file per rank) and by the offline
// reshard (M files from one process). Internal to src/checkpoint.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "checkpoint/atomic_file.h"
#include "checkpoint/index.h"
#include "checkpoint/safetensors_writer.h"

namespace fsdp::ckpt::detail {

struct PieceSpec {
  std::string name;
  at::ScalarType dtype;
  int64_t flat_begin = 0;
  int64_t numel = 0;  // > 0
};

class RankFileWriter {
 public:
  // Creates `path` (which must not exist) and writes the header declaring `pieces`.
  RankFileWriter(const std::string& path, int rank, int world_size,
                 const std::vector<PieceSpec>& pieces, int64_t checksum_block_bytes,
                 PageCache page_cache = PageCache::kUse);

  // Writes the next declared piece: 1-D-able, declared dtype and numel, any device.
  void write_next(const at::Tensor& data);

  // fsyncs and closes the file. Returns its size; pieces() then holds the
  // records (file index left 0 for the caller to set).
  int64_t finish();
  const std::vector<PieceInfo>& pieces() const { return records_; }
  uint64_t header_checksum() const { return writer_.header_checksum(); }

 private:
  OutputFile out_;
  safetensors::Writer writer_;
  std::vector<PieceSpec> specs_;
  std::vector<PieceInfo> records_;
  int64_t block_bytes_;
};

// The safetensors __metadata__ of a rank file.
std::map<std::string, std::string> rank_file_metadata(int rank, int world_size);

}  // namespace fsdp::ckpt::detail
