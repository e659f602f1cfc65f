// The wire formats of fsdp/comm/compression.h: encoding and decoding one
// chunk of values.
//
// [Note: int8 blocks]
// A chunk of n values becomes n int8 codes, padded to a multiple of 4 bytes,
// then ceil(n / B) fp32 scales, one per block of B values. A block's scale is
// its largest magnitude / 127 and a code is round(value / scale), so a value
// is off by at most scale / 2 = max|block| / 254 after decoding: the error
// is bounded relative to the block's own magnitude, whatever the magnitudes
// of other blocks. Symmetric codes (-127..127) keep zero exact and need no
// offset. A non-finite block gets a NaN scale and zero codes ([Note: NaN and
// Inf on the wire] in compression.h).

#include "comm/compression_codec.h"

#include <ATen/ATen.h>

namespace fsdp {
namespace {

constexpr int64_t kQuantMax = 127;

int64_t blocks(const Compression& c, int64_t numel) { return (numel + c.block_size() - 1) / c.block_size(); }

void check_block_size(const Compression& c) {
  TORCH_CHECK(c.block_size() >= 1, "fsdp: compression block_size is ", c.block_size(),
              "; it must be at least 1 (256 is the default)");
}

void check_args(const Compression& c, const at::Tensor& values, const at::Tensor& bytes,
                const char* what) {
  TORCH_CHECK(c.enabled(), "fsdp: ", what, " needs a wire format other than kAsIs");
  TORCH_CHECK(values.dim() == 1 && at::isFloatingType(values.scalar_type()), "fsdp: ", what,
              " takes 1-D floating-point values, got ", values.sizes(), " ", values.scalar_type());
  TORCH_CHECK(bytes.dim() == 1 && bytes.scalar_type() == at::kByte &&
                  bytes.numel() == encoded_bytes(c, values.numel()),
              "fsdp: ", what, " of ", values.numel(), " values needs ",
              encoded_bytes(c, values.numel()), " bytes (1-D kByte), got ", bytes.sizes(), " ",
              bytes.scalar_type());
}

// The int8 codes and the scales inside one encoded chunk.
struct Int8Parts {
  at::Tensor codes;   // [n] kChar
  at::Tensor scales;  // [blocks] kFloat
};

Int8Parts int8_parts(const Compression& c, const at::Tensor& bytes, int64_t numel) {
  const int64_t scales_at = round_up(numel, 4);
  return {bytes.narrow(0, 0, numel).view(at::kChar),
          bytes.narrow(0, scales_at, 4 * blocks(c, numel)).view(at::kFloat)};
}

void encode_int8(const Compression& c, const at::Tensor& values, const at::Tensor& bytes) {
  const int64_t n = values.numel(), nblocks = blocks(c, n), block = c.block_size();
  const Int8Parts parts = int8_parts(c, bytes, n);
  at::Tensor padded = at::zeros({nblocks * block}, values.options().dtype(at::kFloat));
  padded.narrow(0, 0, n).copy_(values);
  const at::Tensor rows = padded.view({nblocks, block});
  const at::Tensor finite = at::isfinite(rows).all(1);
  const at::Tensor scale =
      at::where(finite, rows.abs().amax(1) / kQuantMax, at::full({}, NAN, rows.options()));
  const at::Tensor divisor = at::where(scale > 0, scale, at::ones({}, rows.options()));
  at::Tensor codes = at::round(rows / divisor.unsqueeze(1)).clamp_(-kQuantMax, kQuantMax);
  codes.masked_fill_(finite.logical_not().unsqueeze(1), 0);
  parts.codes.copy_(codes.view(-1).narrow(0, 0, n));
  parts.scales.copy_(scale);
}

// Each code times its block's scale, in fp32.
at::Tensor decode_int8(const Compression& c, const at::Tensor& bytes, int64_t numel) {
  const Int8Parts parts = int8_parts(c, bytes, numel);
  const at::Tensor scale_per_value =
      parts.scales.repeat_interleave(c.block_size()).narrow(0, 0, numel);
  return parts.codes.to(at::kFloat).mul_(scale_per_value);
}

at::Tensor bf16_view(const at::Tensor& bytes) { return bytes.view(at::kBFloat16); }

}  // namespace

const char* to_string(WireFormat format) {
  switch (format) {
    case WireFormat::kAsIs: return "as-is";
    case WireFormat::kBf16: return "bf16";
    case WireFormat::kInt8: return "int8";
  }
  return "?";
}

int64_t encoded_bytes(const Compression& c, int64_t numel) {
  switch (c.format()) {
    case WireFormat::kAsIs: return 4 * numel;
    case WireFormat::kBf16: return 2 * numel;
    case WireFormat::kInt8:
      check_block_size(c);
      return round_up(numel, 4) + 4 * blocks(c, numel);
  }
  TORCH_CHECK(false, "fsdp: unknown wire format ", static_cast<int>(c.format()));
}

void encode(const Compression& c, const at::Tensor& values, const at::Tensor& bytes) {
  check_args(c, values, bytes, "encode");
  if (values.numel() == 0) return;
  if (c.format() == WireFormat::kBf16) {
    bf16_view(bytes).copy_(values);
  } else {
    encode_int8(c, values, bytes);
  }
}

void decode(const Compression& c, const at::Tensor& bytes, const at::Tensor& values) {
  check_args(c, values, bytes, "decode");
  if (values.numel() == 0) return;
  if (c.format() == WireFormat::kBf16) {
    values.copy_(bf16_view(bytes));
  } else {
    values.copy_(decode_int8(c, bytes, values.numel()));
  }
}

void decode_add(const Compression& c, const at::Tensor& bytes, const at::Tensor& accumulator) {
  check_args(c, accumulator, bytes, "decode_add");
  TORCH_CHECK(accumulator.scalar_type() == at::kFloat || accumulator.scalar_type() == at::kDouble,
              "fsdp: decode_add sums in fp32 or fp64, not ", accumulator.scalar_type());
  if (accumulator.numel() == 0) return;
  if (c.format() == WireFormat::kBf16) {
    accumulator.add_(bf16_view(bytes).to(accumulator.scalar_type()));
  } else {
    accumulator.add_(decode_int8(c, bytes, accumulator.numel()));
  }
}

}  // namespace fsdp
