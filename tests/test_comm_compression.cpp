// Compressed communication (fsdp/comm/compression.h): the wire formats'
// round trips and their error bounds, the awkward values (zeros, constants,
// huge and tiny magnitudes, NaN and Inf), the plain all-to-all they build on,
// and the compressed collectives at world sizes 2-4 against fp64 references,
// with the bytes they put on the wire.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "comm/compression_codec.h"
#include "harness/assertions.h"
#include "harness/rank_harness.h"

namespace fsdp::testing {
namespace {

Compression int8(int64_t block = 256) { return Compression().format(WireFormat::kInt8).block_size(block); }
Compression bf16() { return Compression().format(WireFormat::kBf16); }

at::Tensor round_trip(const Compression& c, const at::Tensor& values) {
  at::Tensor bytes = at::empty({encoded_bytes(c, values.numel())}, at::kByte);
  encode(c, values, bytes);
  at::Tensor back = at::empty_like(values);
  decode(c, bytes, back);
  return back;
}

// Per element, the int8 bound of its block: max |block| / 254.
at::Tensor int8_bound(const at::Tensor& values, int64_t block) {
  const int64_t n = values.numel(), blocks = (n + block - 1) / block;
  at::Tensor padded = at::zeros({blocks * block}, at::kDouble);
  padded.narrow(0, 0, n).copy_(values);
  at::Tensor amax = padded.view({blocks, block}).abs().amax(1);
  return (amax / 254).repeat_interleave(block).narrow(0, 0, n);
}

// |decoded - values| <= bound (a few parts in 1e7 of slack for fp32's own
// rounding of code x scale).
void expect_within_int8_bound(const at::Tensor& values, const at::Tensor& decoded, int64_t block,
                              const std::string& what) {
  const at::Tensor error = (decoded.to(at::kDouble) - values.to(at::kDouble)).abs();
  const at::Tensor bound = int8_bound(values, block) * (1 + 1e-6) + 1e-45;
  EXPECT_TRUE((error <= bound).all().item<bool>())
      << what << ": worst error / bound " << (error / bound).max().item<double>();
}

TEST(WireFormat, Int8ErrorIsBoundedByEachBlocksMagnitude) {
  at::manual_seed(1);
  for (int64_t n : {1, 255, 256, 257, 1000, 4096}) {
    for (int64_t block : {1, 7, 64, 256}) {
      at::Tensor x = at::randn({n}) * at::exp(at::randn({n}) * 3);  // magnitudes spread e^±9
      expect_within_int8_bound(x, round_trip(int8(block), x), block,
                               "n " + std::to_string(n) + " block " + std::to_string(block));
    }
  }
}

TEST(WireFormat, Bf16KeepsEightBitsOfMantissa) {
  at::manual_seed(2);
  at::Tensor x = at::randn({3000}) * 1e3;
  const at::Tensor relative = ((round_trip(bf16(), x) - x) / x).abs();
  EXPECT_LE(relative.max().item<double>(), std::ldexp(1.0, -8));
}

TEST(WireFormat, EncodedBytesFollowTheFormula) {
  // int8 with 256-value blocks: 1 byte a value plus a 4-byte scale per block.
  EXPECT_EQ(encoded_bytes(int8(), 4096), 4096 + 4 * 16);
  EXPECT_NEAR(static_cast<double>(encoded_bytes(int8(), 1 << 20)) / (4 << 20), 0.2539, 1e-4);
  EXPECT_EQ(encoded_bytes(int8(), 5), 8 + 4);  // codes padded to 4 bytes
  EXPECT_EQ(encoded_bytes(bf16(), 1001), 2002);
  EXPECT_EQ(encoded_bytes(Compression(), 10), 40);
}

TEST(WireFormat, ZeroBlocksAreExactAndConstantBlocksWithinARounding) {
  at::Tensor x = at::zeros({600});
  x.narrow(0, 256, 256).fill_(-3.7f);
  const at::Tensor back = round_trip(int8(), x);
  EXPECT_TRUE(back.narrow(0, 0, 256).eq(0).all().item<bool>());
  EXPECT_TRUE(back.narrow(0, 512, 88).eq(0).all().item<bool>());
  const at::Tensor constant = back.narrow(0, 256, 256);
  EXPECT_LE((constant + 3.7f).abs().max().item<double>(), 3.7 * 2e-7);
}

TEST(WireFormat, HugeAndTinyBlocksKeepTheirOwnPrecision) {
  // A block of 1e38 beside a block of 1e-30: each is scaled on its own.
  at::manual_seed(3);
  at::Tensor x = at::cat({at::rand({256}) * 1e38, at::rand({256}) * 1e-30, at::randn({256})});
  const at::Tensor back = round_trip(int8(), x);
  EXPECT_TRUE(at::isfinite(back).all().item<bool>());
  expect_within_int8_bound(x, back, 256, "huge, tiny and ordinary blocks");
}

TEST(WireFormat, Int8TurnsANonFiniteBlockIntoNaNAndLeavesTheOthers) {
  at::manual_seed(4);
  at::Tensor x = at::randn({768});
  x[10] = std::numeric_limits<float>::quiet_NaN();
  x[300] = std::numeric_limits<float>::infinity();
  const at::Tensor back = round_trip(int8(), x);
  EXPECT_TRUE(at::isnan(back.narrow(0, 0, 256)).all().item<bool>()) << "the NaN's block";
  EXPECT_TRUE(at::isnan(back.narrow(0, 256, 256)).all().item<bool>()) << "the Inf's block";
  expect_within_int8_bound(x.narrow(0, 512, 256), back.narrow(0, 512, 256), 256, "finite block");
}

TEST(WireFormat, Bf16KeepsNaNAndInfAsTheyAre) {
  at::Tensor x = at::tensor({1.f, std::numeric_limits<float>::quiet_NaN(),
                             -std::numeric_limits<float>::infinity(), 2.f});
  const at::Tensor back = round_trip(bf16(), x);
  EXPECT_TRUE(std::isnan(back[1].item<float>()));
  EXPECT_EQ(back[2].item<float>(), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(back[3].item<float>(), 2.f);
}

TEST(WireFormat, DecodeAddSumsInFp32) {
  at::manual_seed(5);
  at::Tensor x = at::randn({300});
  at::Tensor bytes = at::empty({encoded_bytes(int8(), 300)}, at::kByte);
  encode(int8(), x, bytes);
  at::Tensor acc = at::ones({300});
  decode_add(int8(), bytes, acc);
  // The bound is x's blocks' (x + 1 can have a smaller block maximum than x),
  // plus the fp32 rounding of the sum itself.
  const at::Tensor sum = x.to(at::kDouble) + 1;
  const at::Tensor error = (acc.to(at::kDouble) - sum).abs();
  const at::Tensor bound = int8_bound(x, 256) * (1 + 1e-6) + sum.abs() * std::ldexp(1.0, -23);
  EXPECT_TRUE((error <= bound).all().item<bool>())
      << "one plus the decoded values: worst error / bound "
      << (error / bound).max().item<double>();
}

TEST(WireFormat, BadArgumentsNameTheValueAndTheFix) {
  EXPECT_THROWS_WITH(encoded_bytes(int8(0), 10), "block_size is 0; it must be at least 1");
  at::Tensor bytes = at::empty({7}, at::kByte);
  EXPECT_THROWS_WITH(encode(int8(), at::ones({10}), bytes), "encode of 10 values needs 16 bytes");
  EXPECT_THROWS_WITH(encode(Compression(), at::ones({10}), bytes), "needs a wire format other than kAsIs");
  EXPECT_THROWS_WITH(decode_add(int8(), at::empty({16}, at::kByte), at::ones({10}, at::kBFloat16)),
                     "sums in fp32 or fp64");
}

TEST(AllToAll, ChunkJOfRankRBecomesChunkROfRankJ) {
  for (int world : {1, 2, 3, 4}) {
    run_ranks(world, [&](RankContext& ctx) {
      const int64_t chunk = 5;
      at::Tensor in = at::arange(world * chunk, at::kFloat) + 100 * ctx.rank;
      at::Tensor out = at::full({world * chunk}, -1.f);
      ctx.group->all_to_all(out, in)->wait();
      for (int r = 0; r < world; ++r) {
        const at::Tensor expected = at::arange(ctx.rank * chunk, (ctx.rank + 1) * chunk, at::kFloat) + 100 * r;
        EXPECT_TRUE(out.narrow(0, r * chunk, chunk).equal(expected)) << rank_str(ctx) << " from " << r;
      }
      EXPECT_EQ(ctx.group->counters().all_to_all, 1);
      EXPECT_EQ(ctx.group->counters().bytes_sent, (world - 1) * chunk * 4);
      if (world > 1) {
        EXPECT_THROWS_WITH(ctx.group->all_to_all(at::empty({world * chunk + 1}), at::empty({world * chunk + 1})),
                           "a multiple of the group size");
      }
    });
  }
}

// Every rank's fp32 data, from a generator of its own (ranks are threads),
// so references can draw the same values.
at::Tensor rank_data(int rank, int64_t numel) {
  at::Generator gen = at::detail::createCPUGenerator(100 + rank);
  return at::randn({numel}, gen) * at::exp(at::randn({numel}, gen));
}

// [Note: the error of a compressed average]
// The reduce-scatter quantizes each contribution once, so the average of p
// contributions is off by at most the mean of their block bounds, and the
// largest of those bounds caps that at any p: the check below is the same
// cap at 2, 3 and 4 ranks.
TEST(CompressedReduceScatter, AverageErrorDoesNotGrowWithRanks) {
  const int64_t part = 1000, tail = 3;
  for (int world : {2, 3, 4}) {
    at::Tensor reference = at::zeros({world * part}, at::kDouble);
    at::Tensor worst_bound = at::zeros({world * part}, at::kDouble);
    for (int r = 0; r < world; ++r) {
      const at::Tensor x = rank_data(r, world * part);
      reference += x.to(at::kDouble);
      at::Tensor bound = at::zeros({world * part}, at::kDouble);
      for (int j = 0; j < world; ++j) {  // blocks restart at each row
        bound.narrow(0, j * part, part - tail).copy_(int8_bound(x.narrow(0, j * part, part - tail), 256));
      }
      worst_bound = at::maximum(worst_bound, bound);
    }
    run_ranks(world, [&](RankContext& ctx) {
      at::Tensor input = rank_data(ctx.rank, world * part);
      at::Tensor output = at::empty({part});
      compressed_reduce_scatter(*ctx.group, output, input.clone(), int8(), tail)->wait();
      const at::Tensor mine = reference.narrow(0, ctx.rank * part, part);
      const at::Tensor error = (output.to(at::kDouble) - mine).abs() / world;
      const at::Tensor cap = worst_bound.narrow(0, ctx.rank * part, part) * (1 + 1e-5) + 1e-6 * mine.abs() / world;
      EXPECT_TRUE((error.narrow(0, 0, part - tail) <= cap.narrow(0, 0, part - tail)).all().item<bool>())
          << "world " << world << ", " << rank_str(ctx) << ": worst error / cap "
          << (error / cap).narrow(0, 0, part - tail).max().item<double>();
      // The exact tail is the fp32 sum, in rank order.
      at::Tensor exact = at::zeros({tail});
      for (int r = 0; r < world; ++r) exact += rank_data(r, world * part).narrow(0, ctx.rank * part + part - tail, tail);
      EXPECT_TRUE(output.narrow(0, part - tail, tail).equal(exact)) << rank_str(ctx);
    });
  }
}

TEST(CompressedReduceScatter, SendsTheEncodedBytes) {
  run_ranks(4, [](RankContext& ctx) {
    const int64_t part = 4096;
    at::Tensor output = at::empty({part});
    const CommCounters before = ctx.group->counters();
    compressed_reduce_scatter(*ctx.group, output, at::randn({4 * part}), int8())->wait();
    const CommCounters sent = ctx.group->counters() - before;
    EXPECT_EQ(sent.all_to_all, 1);
    EXPECT_EQ(sent.reduce_scatter, 0);
    EXPECT_EQ(sent.bytes_sent, 3 * encoded_bytes(int8(), part));  // (p-1) rows
    // Against fp32's (p - 1) x 4 bytes a value: the formula's 0.254.
    EXPECT_NEAR(static_cast<double>(sent.bytes_sent) / (3 * 4 * part), 0.2539, 1e-3);
  });
}

TEST(CompressedAllGather, EveryRankDecodesTheSameValues) {
  for (const Compression& c : {int8(), int8(32), bf16()}) {
    run_ranks(3, [&](RankContext& ctx) {
      const int64_t k = 777;
      const at::Tensor shard = rank_data(ctx.rank, k);
      at::Tensor gathered = at::empty({3 * k});
      const CommCounters before = ctx.group->counters();
      compressed_all_gather(*ctx.group, gathered, shard, c)->wait();
      const CommCounters sent = ctx.group->counters() - before;
      EXPECT_EQ(sent.bytes_sent, 2 * ((encoded_bytes(c, k) + 3) / 4 * 4));
      for (int r = 0; r < 3; ++r) {
        // Each rank's part is what that rank would decode from its own bytes.
        EXPECT_TRUE(gathered.narrow(0, r * k, k).equal(round_trip(c, rank_data(r, k))))
            << to_string(c.format()) << ", part of rank " << r << " on " << rank_str(ctx);
      }
    });
  }
}

TEST(CompressedAllGather, DecodesIntoTheOutputsDtype) {
  run_ranks(2, [](RankContext& ctx) {
    at::Tensor gathered = at::empty({2 * 300}, at::kBFloat16);
    compressed_all_gather(*ctx.group, gathered, rank_data(ctx.rank, 300), int8())->wait();
    const at::Tensor expected = round_trip(int8(), rank_data(1, 300)).to(at::kBFloat16);
    EXPECT_TRUE(gathered.narrow(0, 300, 300).equal(expected));
  });
}

TEST(CompressedAllReduce, SumsWithinTwoQuantizationsAndTheTailExactly) {
  for (int world : {2, 4}) {
    run_ranks(world, [&](RankContext& ctx) {
      const int64_t n = 2003, tail = 5;
      at::Tensor tensor = rank_data(ctx.rank, n);
      at::Tensor reference = at::zeros({n}, at::kDouble);
      double magnitude = 0;
      for (int r = 0; r < world; ++r) {
        reference += rank_data(r, n).to(at::kDouble);
        magnitude = std::max(magnitude, rank_data(r, n).abs().max().item<double>());
      }
      compressed_all_reduce(*ctx.group, tensor, int8(), tail)->wait();
      // Each contribution quantized once, then the sum once more.
      const double cap = world * magnitude / 254 + reference.abs().max().item<double>() / 254;
      EXPECT_LE((tensor.to(at::kDouble) - reference).narrow(0, 0, n - tail).abs().max().item<double>(), cap * (1 + 1e-5));
      at::Tensor exact = at::zeros({tail});
      for (int r = 0; r < world; ++r) exact += rank_data(r, n).narrow(0, n - tail, tail);
      EXPECT_TRUE(tensor.narrow(0, n - tail, tail).equal(exact)) << rank_str(ctx);
      // Every rank holds the same result.
      at::Tensor first = tensor.clone();
      ctx.group->broadcast(first, 0)->wait();
      EXPECT_TRUE(tensor.equal(first)) << rank_str(ctx);
    });
  }
}

TEST(CompressedCollectives, AsIsIsThePlainCollective) {
  run_ranks(2, [](RankContext& ctx) {
    at::Tensor input = rank_data(ctx.rank, 64);
    at::Tensor plain = at::empty({32}), compressed = at::empty({32});
    ctx.group->reduce_scatter(plain, input.clone(), ReduceOp::kSum)->wait();
    compressed_reduce_scatter(*ctx.group, compressed, input.clone(), Compression())->wait();
    EXPECT_TRUE(plain.equal(compressed));
    at::Tensor gathered = at::empty({128});
    const CommCounters before = ctx.group->counters();
    compressed_all_gather(*ctx.group, gathered, input, Compression())->wait();
    EXPECT_EQ((ctx.group->counters() - before).all_gather, 1);
    EXPECT_TRUE(gathered.narrow(0, 64 * ctx.rank, 64).equal(input));
  });
}

}  // namespace
}  // namespace fsdp::testing
