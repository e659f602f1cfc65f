#pragma once
// The wire formats of fsdp/comm/compression.h, one chunk at a time: what the
// compressed collectives (compressed_collectives.cpp) send and receive. The
// layout is in [Note: int8 blocks] in compression_codec.cpp.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "fsdp/comm/compression.h"
#include "round_up.h"  // the byte alignment of the wire format's parts

namespace fsdp {

// Bytes `numel` values take on the wire in `compression`'s format (kAsIs:
// fp32's). Throws c10::Error naming a block size below 1.
int64_t encoded_bytes(const Compression& compression, int64_t numel);

// `values` (1-D, floating point) into `bytes` (1-D kByte, exactly
// encoded_bytes(numel)). Not for kAsIs.
void encode(const Compression& compression, const at::Tensor& values, const at::Tensor& bytes);
// Overwrites `values` (1-D, any floating dtype) with what `bytes` encodes.
void decode(const Compression& compression, const at::Tensor& bytes, const at::Tensor& values);
// Adds what `bytes` encodes to `accumulator` (1-D kFloat or kDouble).
void decode_add(const Compression& compression, const at::Tensor& bytes,
                const at::Tensor& accumulator);

}  // namespace fsdp
