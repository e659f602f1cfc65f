#pragma once
// Compressed collectives: fewer bytes on a slow link, at a bounded loss of
// precision (ZeRO++'s qwZ and qgZ, arXiv 2306.10209).
//
// A Compression says how floating-point values travel: as they are, as
// bf16, or as int8 with one fp32 scale per block of `block_size` values. The
// sender encodes, the receiver decodes; sums are always taken in fp32 after
// decoding, never in the wire format, so nothing overflows and rounding does
// not pile up along a ring. See [Note: compressed reduce-scatter] in
// src/comm/compressed_collectives.cpp for why the error of an average does
// not grow with the number of ranks.
//
//   fsdp::Compression int8 = fsdp::Compression().format(fsdp::WireFormat::kInt8);
//   fsdp::compressed_all_gather(*group, gathered, shard, int8)->wait();
//
// [Note: NaN and Inf on the wire]
// bf16 keeps NaN and Inf as they are. int8 cannot carry them: a block that
// holds a NaN or an Inf decodes to NaN in every element (its scale is NaN),
// so a non-finite value is never hidden as a finite one, though an Inf loses
// its sign and its neighbours in the block are lost with it. Blocks of zeros
// decode to exact zeros; a constant block decodes to within one rounding of
// the constant.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>

#include "fsdp/comm/process_group.h"
#include "fsdp/comm/work.h"

namespace fsdp {

enum class WireFormat {
  kAsIs,  // the tensor's own dtype: no compression
  kBf16,  // bfloat16: half of fp32's bytes, 8 bits of mantissa
  kInt8,  // int8 per element plus an fp32 scale per block
};

const char* to_string(WireFormat format);

struct Compression {
  // False for kAsIs: the collective runs uncompressed.
  bool enabled() const { return format_ != WireFormat::kAsIs; }

  /// How values travel. Default: as they are.
  TORCH_ARG(WireFormat, format) = WireFormat::kAsIs;
  /// kInt8: values per fp32 scale. Smaller blocks follow the values'
  /// magnitudes more closely and send more scales. Default: 256 (0.254 of
  /// fp32's bytes).
  TORCH_ARG(int64_t, block_size) = 256;
};

// The collectives of ProcessGroup, compressed. Each rank encodes what it
// sends, including its own part, so every rank decodes identical values.
// With a kAsIs compression they are the plain collectives.
//
// all-gather: `output` (numel size() x input's) receives every rank's
// decoded input, in output's dtype.
WorkPtr compressed_all_gather(ProcessGroup& group, const at::Tensor& output,
                              const at::Tensor& input, const Compression& compression);
// Sum reduce-scatter: `input` has size() rows; rank r's `output` gets the sum
// of every rank's row r, decoded and added in fp32. The last `exact_tail`
// elements of each row travel and are summed exactly (FSDP's used-parameter
// counts ride there).
WorkPtr compressed_reduce_scatter(ProcessGroup& group, const at::Tensor& output,
                                  const at::Tensor& input, const Compression& compression,
                                  int64_t exact_tail = 0);
// Sum all-reduce, in place: a compressed reduce-scatter, then a compressed
// all-gather of the reduced parts (issued when the returned work is waited
// for). The last `exact_tail` elements are summed exactly.
WorkPtr compressed_all_reduce(ProcessGroup& group, const at::Tensor& tensor,
                              const Compression& compression, int64_t exact_tail = 0);

}  // namespace fsdp
