#include "checkpoint/rank_file.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "checkpoint/checksum.h"

namespace fsdp::ckpt::detail {

namespace {
std::vector<safetensors::Writer::Declared> declare(const std::vector<PieceSpec>& pieces) {
  std::vector<safetensors::Writer::Declared> declared;
  declared.reserve(pieces.size());
  for (const auto& p : pieces) {
    TORCH_CHECK(p.numel > 0, "fsdp: internal: empty piece of '", p.name, "' declared for a rank file");
    declared.push_back({piece_key(p.name, p.flat_begin), p.dtype, {p.numel}});
  }
  return declared;
}
}  // namespace

std::map<std::string, std::string> rank_file_metadata(int rank, int world_size) {
  return {{"format", std::string(kFormatName) + "-rank-file"},
          {"format_version", std::to_string(kFormatVersion)},
          {"rank", std::to_string(rank)},
          {"world_size", std::to_string(world_size)}};
}

RankFileWriter::RankFileWriter(const std::string& path, int rank, int world_size,
                               const std::vector<PieceSpec>& pieces, int64_t checksum_block_bytes,
                               PageCache page_cache)
    : out_(path, /*truncate_existing=*/false, page_cache),
      writer_(out_, declare(pieces), rank_file_metadata(rank, world_size)),
      specs_(pieces),
      block_bytes_(checksum_block_bytes) {}

void RankFileWriter::write_next(const at::Tensor& data) {
  const size_t i = records_.size();
  TORCH_CHECK(i < specs_.size(), "fsdp: internal: more pieces written than declared in '", out_.path(), "'");
  const PieceSpec& spec = specs_[i];
  TORCH_CHECK(data.scalar_type() == spec.dtype, "fsdp: piece of '", spec.name, "' at element ", spec.flat_begin,
              " has dtype ", c10::toString(data.scalar_type()), " but the tensor is ",
              c10::toString(spec.dtype));
  TORCH_CHECK(data.numel() == spec.numel, "fsdp: piece of '", spec.name, "' at element ", spec.flat_begin,
              " has ", data.numel(), " elements, expected ", spec.numel);
  at::Tensor cpu = data.to(at::kCPU).contiguous();
  const int64_t nbytes = static_cast<int64_t>(cpu.nbytes());
  PieceInfo record;
  record.key = piece_key(spec.name, spec.flat_begin);
  record.flat_begin = spec.flat_begin;
  record.flat_end = spec.flat_begin + spec.numel;
  record.block_checksums = block_checksums(cpu.data_ptr(), nbytes, block_bytes_);
  record.byte_offset = writer_.write_next_bytes(cpu.data_ptr(), nbytes);
  records_.push_back(std::move(record));
}

int64_t RankFileWriter::finish() {
  writer_.finish();
  out_.sync();
  const int64_t bytes = out_.offset();
  out_.close();
  return bytes;
}

}  // namespace fsdp::ckpt::detail
