// The checkpoint format in one process: safetensors files, the index, reads
// of arbitrary ranges across pieces, corruption, truncation, a missing index,
// strict key checks, and the save checks that need no process group
// (save_local writes every rank's file from one process).

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <c10/util/accumulate.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <rapidjson/document.h>
#include <random>

#include "checkpoint/atomic_file.h"
#include "checkpoint/save_hook.h"
#include "fsdp/checkpoint/index.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/checkpoint/save.h"
#include "fsdp/checkpoint/strict_check.h"
#include "harness/temp_dir.h"
#include "harness/assertions.h"
#include "harness/file_damage.h"

namespace fs = std::filesystem;
using fsdp::ckpt::Reader;
using fsdp::ckpt::SaveOptions;
using fsdp::ckpt::TensorPiece;
using fsdp::testing::flip_byte;

namespace {

// Each file's directories carry its own prefix, to tell leftovers apart.
class TempDir : public fsdp::testing::TempDir {
 public:
  TempDir() : fsdp::testing::TempDir("fsdp-ckpt-test") {}
};

// Deterministic contents of every dtype.
at::Tensor make_tensor(const std::vector<int64_t>& shape, at::ScalarType dtype, int seed) {
  const int64_t n = c10::multiply_integers(shape);
  at::Tensor base = at::arange(n, at::kDouble).mul(0.37).add(seed).sin().mul(100);
  if (dtype == at::kBool) return base.gt(0).reshape(shape);
  return base.to(dtype).reshape(shape);
}

// Splits `full` into `world_size` uneven ranges and returns rank r's pieces.
std::vector<std::vector<TensorPiece>> shard_like_fsdp(
    const std::vector<std::pair<std::string, at::Tensor>>& sharded,
    const std::vector<std::pair<std::string, at::Tensor>>& replicated, int world_size) {
  std::vector<std::vector<TensorPiece>> by_rank(world_size);
  for (const auto& [name, full] : sharded) {
    const int64_t n = full.numel();
    const int64_t chunk = (n + world_size - 1) / world_size;
    at::Tensor flat = full.reshape({-1});
    for (int r = 0; r < world_size; ++r) {
      const int64_t begin = std::min(n, r * chunk), end = std::min(n, begin + chunk);
      by_rank[r].push_back({name, full.sizes().vec(), full.scalar_type(), begin, flat.slice(0, begin, end)});
    }
  }
  for (const auto& [name, full] : replicated)
    by_rank[0].push_back({name, full.sizes().vec(), full.scalar_type(), 0, full.reshape({-1})});
  return by_rank;
}

struct Sample {
  std::vector<std::pair<std::string, at::Tensor>> sharded;
  std::vector<std::pair<std::string, at::Tensor>> replicated;
  at::Tensor get(const std::string& name) const {
    for (const auto& kv : sharded)
      if (kv.first == name) return kv.second;
    for (const auto& kv : replicated)
      if (kv.first == name) return kv.second;
    throw std::runtime_error("no " + name);
  }
};

Sample sample_model() {
  Sample s;
  s.sharded = {{"embed.weight", make_tensor({37, 11}, at::kFloat, 1)},
               {"layers.0.weight", make_tensor({13, 7}, at::kBFloat16, 2)},
               {"layers.0.bias", make_tensor({2}, at::kHalf, 3)},  // fewer elements than ranks
               {"optim.state.embed.weight.exp_avg", make_tensor({37, 11}, at::kDouble, 4)},
               {"ids", make_tensor({29}, at::kLong, 5)}};
  s.replicated = {{"optim.state.step", at::scalar_tensor(17, at::kLong)},
                  {"norm.running_mean", make_tensor({5}, at::kFloat, 6)},
                  {"mask", make_tensor({4}, at::kBool, 7)}};
  return s;
}


const fsdp::ckpt::PieceInfo& piece_of(const Reader& reader, const std::string& name, size_t i) {
  return reader.index().tensors[reader.index().find(name)].pieces.at(i);
}

std::string piece_file(const Reader& reader, const std::string& name, size_t i) {
  return (fs::path(reader.dir()) / reader.index().files[piece_of(reader, name, i).file].name).string();
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtypeAndScalars) {
  TempDir tmp;
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"bf16", make_tensor({3, 5}, at::kBFloat16, 1)}, {"f16", make_tensor({7}, at::kHalf, 2)},
      {"f32", make_tensor({2, 3, 4}, at::kFloat, 3)},  {"f64", make_tensor({6}, at::kDouble, 4)},
      {"i64", make_tensor({9}, at::kLong, 5)},         {"i32", make_tensor({2, 2}, at::kInt, 6)},
      {"u8", make_tensor({3}, at::kByte, 7)},          {"bool", make_tensor({5}, at::kBool, 8)},
      {"scalar", at::scalar_tensor(2.5, at::kFloat)},  {"empty", at::empty({0, 3}, at::kFloat)},
      {"noncontig", make_tensor({4, 6}, at::kFloat, 9).t()}};
  const std::string path = tmp / "model.safetensors";
  fsdp::ckpt::safetensors::save_file(path, tensors, {{"hello", "world"}});

  auto loaded = fsdp::ckpt::safetensors::load_file(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  std::map<std::string, at::Tensor> by_name(loaded.begin(), loaded.end());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const at::Tensor& got = by_name[name];
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(got, t.contiguous())) << name;
  }

  // The bytes follow the spec, checked without our reader: u64 LE header
  // length, JSON header, 8-byte aligned data, entries at their offsets.
  const std::string bytes = fsdp::ckpt::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  rapidjson::Document header;
  header.Parse(bytes.substr(8, n).c_str());
  ASSERT_FALSE(header.HasParseError());
  EXPECT_STREQ(header["__metadata__"]["hello"].GetString(), "world");
  EXPECT_STREQ(header["bf16"]["dtype"].GetString(), "BF16");
  EXPECT_STREQ(header["f16"]["dtype"].GetString(), "F16");
  EXPECT_STREQ(header["i64"]["dtype"].GetString(), "I64");
  EXPECT_STREQ(header["bool"]["dtype"].GetString(), "BOOL");
  EXPECT_TRUE(header["scalar"]["shape"].IsArray() && header["scalar"]["shape"].Empty());
  const std::vector<int64_t> off = {header["f64"]["data_offsets"][0].GetInt64(),
                                    header["f64"]["data_offsets"][1].GetInt64()};
  ASSERT_EQ(off[1] - off[0], 6 * 8);
  double first = 0;
  std::memcpy(&first, bytes.data() + 8 + n + off[0], 8);
  EXPECT_EQ(first, tensors[3].second[0].item<double>());
  EXPECT_EQ(8 + n + header["empty"]["data_offsets"][1].GetUint64() <= bytes.size(), true);
}

TEST(Safetensors, RejectsExistingFileUnlessOverwrite) {
  TempDir tmp;
  const std::string path = tmp / "a.safetensors";
  fsdp::ckpt::safetensors::save_file(path, {{"x", at::ones({2})}});
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::save_file(path, {{"x", at::zeros({2})}}), "already exists");
  fsdp::ckpt::safetensors::save_file(path, {{"x", at::zeros({2})}}, {}, /*overwrite=*/true);
  EXPECT_TRUE(at::equal(fsdp::ckpt::safetensors::load_file(path)[0].second, at::zeros({2})));
  for (const auto& entry : fs::directory_iterator(tmp.path()))
    EXPECT_EQ(entry.path().filename().string(), "a.safetensors") << "temporary file left behind";
}

TEST(Safetensors, CorruptHeadersAreNamed) {
  TempDir tmp;
  const std::string path = tmp / "bad.safetensors";
  fsdp::ckpt::write_file_atomic(path, std::string("\x05\x00\x00\x00", 4), false);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "bad.safetensors' is not a safetensors file");

  std::string huge(16, '\0');
  huge[0] = '\x7f';
  huge[3] = '\x01';
  fsdp::ckpt::write_file_atomic(path, huge, true);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "header length field says");

  std::string garbage(8, '\0');
  garbage[0] = 8;
  garbage += "{nope!!}";
  fsdp::ckpt::write_file_atomic(path, garbage, true);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "invalid JSON");

  // Entry lying past the end of the data: a truncated file.
  fsdp::ckpt::safetensors::save_file(path, {{"x", at::ones({1000})}}, {}, true);
  fs::resize_file(path, fs::file_size(path) - 8);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "is truncated: tensor 'x'");

  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::dtype_name(at::kComplexFloat), "cannot be stored in safetensors");
}

TEST(CheckpointIndex, JsonRoundTripAndValidation) {
  fsdp::ckpt::Index index;
  index.world_size = 2;
  index.step = 42;
  index.extras_json = R"({"lr":0.5,"loader":{"epoch":3}})";
  index.checksum_block_bytes = 16;
  index.files = {{"rank-00000-of-00002.safetensors", 0, 100}, {"rank-00001-of-00002.safetensors", 1, 80}};
  fsdp::ckpt::TensorInfo t{"w", {2, 5}, at::kFloat, {}};
  t.pieces.push_back({0, "w@0", 0, 6, 64, {0x0123456789abcdefULL, 0xfedcba9876543210ULL}});
  t.pieces.push_back({1, "w@6", 6, 10, 72, {42}});
  index.tensors.push_back(t);
  index.tensors.push_back({"s", {}, at::kLong, {{0, "s@0", 0, 1, 88, {7}}}});

  const std::string j = index.to_json();
  rapidjson::Document parsed;
  parsed.Parse(j.c_str());
  ASSERT_FALSE(parsed.HasParseError()) << j;
  EXPECT_STREQ(parsed["format"].GetString(), "libfsdp-checkpoint");
  EXPECT_STREQ(parsed["tensors"][0]["pieces"][0]["block_xxh64"][0].GetString(), "0123456789abcdef");
  EXPECT_EQ(parsed["extras"]["loader"]["epoch"].GetInt(), 3);
  const auto back = fsdp::ckpt::Index::from_json(j, "test");
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(back.tensors[0].pieces[1].block_checksums[0], 42u);
  EXPECT_EQ(back.extras_json, index.extras_json);

  auto gap = index;
  gap.tensors[0].pieces[1].flat_begin = 7;
  EXPECT_THROWS_WITH(gap.validate("idx"), "tensor 'w' pieces leave a gap at element 6");
  auto overlap = index;
  overlap.tensors[0].pieces[1].flat_begin = 5;
  overlap.tensors[0].pieces[1].block_checksums = {1, 2};  // 5 floats = 20 bytes = 2 blocks
  EXPECT_THROWS_WITH(overlap.validate("idx"), "tensor 'w' pieces overlap at element 5");
  auto short_cover = index;
  short_cover.tensors[0].shape = {2, 6};
  EXPECT_THROWS_WITH(short_cover.validate("idx"), "has 12 elements but its pieces cover only [0, 10)");
  auto bad_hashes = index;
  bad_hashes.tensors[0].pieces[0].block_checksums.pop_back();
  EXPECT_THROWS_WITH(bad_hashes.validate("idx"), "has 1 block checksums, expected 2");
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = j;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << j;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(replaced("\"format_version\": 1", "\"format_version\": 99"), "idx"),
                     "format_version 99");
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(
                         replaced("\"rank-00000-of-00002.safetensors\"", "\"../etc/passwd\""), "idx"),
                     "must be a plain name");
  // A field of the wrong type is named, with the file.
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(replaced("\"step\": 42", "\"step\": \"42\""),
                                                  "checkpoint index 'x/index.json'"),
                     "checkpoint index 'x/index.json': field 'step' is not an integer (it is a string)");
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(replaced("\"extras\": {", "\"extras\": [1], \"x\": {"), "idx"),
                     "field 'extras' is not an object (it is an array)");
}

// Issue #13, points 6 and 7: every field read from disk is range- and
// overflow-checked, so a damaged index is an error, never a resumed run with a
// negative step or a wrapped size that passes the other checks.
TEST(CheckpointIndex, FieldsFromDiskAreRangeAndOverflowChecked) {
  fsdp::ckpt::Index index;
  index.checksum_block_bytes = 16;
  index.files = {{"rank-00000-of-00001.safetensors", 0, 100}};
  index.tensors.push_back({"s", {}, at::kLong, {{0, "s@0", 0, 1, 88, {7}}}});
  index.validate("idx");

  auto negative_step = index;
  negative_step.step = -5;
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(negative_step.to_json(), "idx"),
                     "idx: step must be >= 0, got -5");
  auto huge = index;
  huge.tensors[0].shape = {16384, (int64_t{1} << 50) + 1};
  EXPECT_THROWS_WITH(huge.validate("idx"),
                     "tensor 's' of shape [16384, 1125899906842625]: its element count overflows "
                     "int64");
  auto huge_bytes = index;
  huge_bytes.tensors[0].shape = {int64_t{1} << 61};
  EXPECT_THROWS_WITH(huge_bytes.validate("idx"), "tensor 's': its byte size overflows int64");
  auto past_end = index;
  past_end.tensors[0].pieces[0].flat_end = int64_t{1} << 62;
  EXPECT_THROWS_WITH(past_end.validate("idx"), "has 1 elements but a piece ends at");
  auto negative_size = index;
  negative_size.files[0].bytes = -1;
  EXPECT_THROWS_WITH(negative_size.validate("idx"), "has a negative size -1");
}

TEST(CheckpointReader, ReadsArbitraryRangesAcrossPieces) {
  TempDir tmp;
  const Sample s = sample_model();
  SaveOptions options;
  options.step = 1234;
  options.extras_json = R"({"data_position": 98765, "note": "hi"})";
  options.checksum_block_bytes = 24;  // tiny blocks: ranges start and end mid-block
  const std::string dir = tmp / "ckpt";
  fsdp::ckpt::save_local(dir, shard_like_fsdp(s.sharded, s.replicated, 3), options);

  const Reader reader = Reader::open(dir);
  EXPECT_EQ(reader.step(), 1234);
  EXPECT_EQ(reader.extras_json(), R"({"data_position":98765,"note":"hi"})");
  SaveOptions not_an_object = options;
  not_an_object.extras_json = "[1, 2]";
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "other", shard_like_fsdp(s.sharded, s.replicated, 1), not_an_object),
                     "SaveOptions::extras_json must be the text of a JSON object");
  not_an_object.extras_json = "{\"unclosed\": ";
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "other", shard_like_fsdp(s.sharded, s.replicated, 1), not_an_object),
                     "SaveOptions::extras_json must be the text of a JSON object, e.g. {\"data_position\": 123}; "
                     "got invalid JSON (");
  EXPECT_FALSE(fs::exists(tmp / "other"));
  EXPECT_EQ(reader.saved_world_size(), 3);
  EXPECT_EQ(reader.names().size(), s.sharded.size() + s.replicated.size());
  EXPECT_EQ(reader.names()[0], "embed.weight");  // save order
  EXPECT_EQ(reader.global_shape("optim.state.step"), std::vector<int64_t>{});
  EXPECT_EQ(reader.dtype("layers.0.weight"), at::kBFloat16);
  EXPECT_EQ(reader.index().tensors[reader.index().find("embed.weight")].pieces.size(), 3u);
  EXPECT_TRUE(reader.contains("mask"));
  EXPECT_FALSE(reader.contains("nope"));

  std::mt19937 rng(7);
  for (const auto& name : reader.names()) {
    const at::Tensor full = s.get(name);
    const at::Tensor flat = full.reshape({-1});
    EXPECT_TRUE(at::equal(reader.read_full(name), full)) << name;
    const int64_t n = full.numel();
    for (int trial = 0; trial < 40; ++trial) {
      const int64_t begin = std::uniform_int_distribution<int64_t>(0, n)(rng);
      const int64_t count = std::uniform_int_distribution<int64_t>(0, n - begin)(rng);
      at::Tensor got = reader.read(name, begin, count);
      ASSERT_EQ(got.dim(), 1);
      ASSERT_TRUE(at::equal(got, flat.slice(0, begin, begin + count)))
          << name << " [" << begin << ", " << begin + count << ")";
    }
  }
  // read_into fills a caller's buffer.
  at::Tensor out = at::empty({10}, at::kDouble);
  reader.read_into("optim.state.embed.weight.exp_avg", 100, out);
  EXPECT_TRUE(at::equal(out, s.get("optim.state.embed.weight.exp_avg").reshape({-1}).slice(0, 100, 110)));

  EXPECT_THROWS_WITH(reader.read("embed.weight", 400, 10), "cannot read elements [400, 410) of 'embed.weight'");
  EXPECT_THROWS_WITH(reader.read("embed.wieght", 0, 1), "has no tensor 'embed.wieght'");
  EXPECT_THROWS_WITH(reader.read_into("ids", 0, at::empty({3}, at::kFloat)), "must be a contiguous CPU tensor of dtype Long");
  const auto report = reader.verify_all();
  EXPECT_EQ(report.tensors, 8);
}

TEST(CheckpointReader, EachRankFileIsAStandardSafetensorsFile) {
  TempDir tmp;
  const Sample s = sample_model();
  const std::string dir = tmp / "ckpt";
  fsdp::ckpt::save_local(dir, shard_like_fsdp(s.sharded, s.replicated, 2));
  auto rank1 = fsdp::ckpt::safetensors::load_file(dir + "/rank-00001-of-00002.safetensors");
  std::map<std::string, at::Tensor> by_key(rank1.begin(), rank1.end());
  // embed.weight has 407 elements: chunk 204, rank 1 holds [204, 407).
  ASSERT_TRUE(by_key.count("embed.weight@204"));
  EXPECT_TRUE(at::equal(by_key["embed.weight@204"], s.get("embed.weight").reshape({-1}).slice(0, 204)));
  EXPECT_FALSE(by_key.count("optim.state.step@0")) << "replicated tensors live in rank 0's file only";
  const auto header = fsdp::ckpt::safetensors::read_header(dir + "/rank-00001-of-00002.safetensors");
  EXPECT_EQ(header.metadata.at("rank"), "1");
  EXPECT_EQ(header.metadata.at("world_size"), "2");
}

TEST(CheckpointReader, CorruptionIsNamedAndOnlyTouchedBlocksAreChecked) {
  TempDir tmp;
  const Sample s = sample_model();
  SaveOptions options;
  options.checksum_block_bytes = 64;  // 16 floats per block
  const std::string dir = tmp / "ckpt";
  fsdp::ckpt::save_local(dir, shard_like_fsdp(s.sharded, s.replicated, 2), options);
  Reader reader = Reader::open(dir);
  // embed.weight: rank 1's piece holds elements [204, 407). Corrupt element 204 + 40.
  const auto& piece = piece_of(reader, "embed.weight", 1);
  ASSERT_EQ(piece.flat_begin, 204);
  const std::string file = piece_file(reader, "embed.weight", 1);
  flip_byte(file, piece.byte_offset + 40 * 4 + 1);

  reader = Reader::open(dir);
  EXPECT_THROWS_WITH(reader.read("embed.weight", 240, 10),
                     "checkpoint data file '" + file + "' is corrupted: tensor 'embed.weight' elements [236, 252)");
  EXPECT_THROWS_WITH(reader.read_full("embed.weight"), "tensor 'embed.weight'");
  // Blocks that were not touched still read: [204, 236) and [252, 407).
  EXPECT_TRUE(at::equal(reader.read("embed.weight", 204, 32), s.get("embed.weight").reshape({-1}).slice(0, 204, 236)));
  EXPECT_TRUE(at::equal(reader.read("embed.weight", 252, 155), s.get("embed.weight").reshape({-1}).slice(0, 252)));
  EXPECT_THROWS_WITH(reader.verify_all(), "is corrupted: tensor 'embed.weight'");
  EXPECT_THROWS_WITH(reader.verify_all(), "failed verification (1 problem)");
}

TEST(CheckpointReader, TruncationIsNamed) {
  TempDir tmp;
  const Sample s = sample_model();
  const std::string dir = tmp / "ckpt";
  fsdp::ckpt::save_local(dir, shard_like_fsdp(s.sharded, s.replicated, 2));
  const Reader reader = Reader::open(dir);
  const std::string file = dir + "/rank-00001-of-00002.safetensors";
  // The last tensor in rank 1's file is "ids" ([15, 29) of 29 int64s).
  fs::resize_file(file, fs::file_size(file) - 20);
  // The file is checked against the index when first opened, so a load
  // refuses it as verify does ([Note: every byte of a rank file is checked]).
  EXPECT_THROWS_WITH(reader.read("ids", 20, 5), "checkpoint data file '" + file +
                                                    "' holding tensor 'ids' has ");
  EXPECT_THROWS_WITH(reader.read("ids", 20, 5), "(truncated)");
  EXPECT_TRUE(at::equal(reader.read("ids", 0, 15), s.get("ids").slice(0, 0, 15)));  // rank 0's part is fine
  EXPECT_THROWS_WITH(reader.verify_all(), "checkpoint data file '" + file + "' has ");
  EXPECT_THROWS_WITH(reader.verify_all(), "(truncated)");

  fs::remove(file);
  const Reader again = Reader::open(dir);
  EXPECT_THROWS_WITH(again.read_full("embed.weight"),
                     "checkpoint data file '" + file + "' holding tensor 'embed.weight' cannot be opened");
}

// Issue #13, point 5: the header and its length are checksummed too, and
// appended bytes are refused by a load as by verify.
TEST(CheckpointReader, ADamagedHeaderOrAppendedBytesFailVerifyAndLoadAlike) {
  const Sample s = sample_model();
  const auto damage_and_check = [&](const std::function<void(const std::string&)>& damage,
                                    const std::string& expected) {
    SCOPED_TRACE(expected);
    TempDir tmp;
    const std::string dir = tmp / "ckpt";
    fsdp::ckpt::save_local(dir, shard_like_fsdp(s.sharded, s.replicated, 2));
    ASSERT_TRUE(Reader::open(dir).index().files[1].header_checksum.has_value());
    const std::string file = dir + "/rank-00001-of-00002.safetensors";
    damage(file);
    const Reader reader = Reader::open(dir);
    EXPECT_THROWS_WITH(reader.verify_all(), "checkpoint data file '" + file + "' ");
    EXPECT_THROWS_WITH(reader.verify_all(), expected);
    EXPECT_THROWS_WITH(reader.read_full("embed.weight"),
                       "checkpoint data file '" + file + "' holding tensor 'embed.weight' ");
    EXPECT_THROWS_WITH(reader.read_full("embed.weight"), expected);
  };
  // The JSON header's opening '{' (byte 8), then one byte of its length.
  damage_and_check([](const std::string& f) { flip_byte(f, 8); },
                   "has a damaged safetensors header (its checksum does not match the index)");
  damage_and_check([](const std::string& f) { flip_byte(f, 1); },
                   "has a damaged safetensors header");
  damage_and_check([](const std::string& f) { std::ofstream(f, std::ios::app) << "tail"; },
                   "(extra bytes appended)");
}

TEST(CheckpointReader, MissingIndexSaysTheSaveDidNotComplete) {
  TempDir tmp;
  const Sample s = sample_model();
  const std::string dir = tmp / "ckpt";
  fsdp::ckpt::save_local(dir, shard_like_fsdp(s.sharded, s.replicated, 2));
  fs::remove(dir + "/index.json");
  EXPECT_THROWS_WITH(Reader::open(dir),
                     "has no index.json: the save did not complete (was a rank killed?)");
  EXPECT_THROWS_WITH(Reader::open(tmp / "never-saved"), "checkpoint directory '" + (tmp / "never-saved") + "' does not exist");
  fs::create_directory(tmp / "step-5.partial-123-abc");
  EXPECT_THROWS_WITH(Reader::open(tmp / "step-5"), "step-5.partial-123-abc', left by a save that did not complete");
  fsdp::ckpt::write_file_atomic(dir + "/index.json", "{\"format\": ", false);
  EXPECT_THROWS_WITH(Reader::open(dir), "index.json' is corrupted (invalid JSON: ");
}

TEST(CheckpointStrictCheck, ListsEveryProblemAtOnce) {
  TempDir tmp;
  const Sample s = sample_model();
  const std::string dir = tmp / "ckpt";
  fsdp::ckpt::save_local(dir, shard_like_fsdp(s.sharded, s.replicated, 1));
  const Reader reader = Reader::open(dir);
  std::map<std::string, fsdp::ckpt::ExpectedTensor> expected;
  for (const auto& name : reader.names()) expected[name] = {reader.global_shape(name), reader.dtype(name)};
  EXPECT_TRUE(fsdp::ckpt::compare_keys(reader, expected).ok());
  fsdp::ckpt::check_strict(reader, expected);

  expected.erase("mask");
  expected.erase("ids");
  expected["head.weight"] = {{4, 4}, at::kFloat};
  expected["embed.weight"] = {{11, 37}, at::kFloat};
  expected["layers.0.weight"] = {{13, 7}, at::kFloat};
  const auto check = fsdp::ckpt::compare_keys(reader, expected);
  EXPECT_EQ(check.missing, std::vector<std::string>{"head.weight"});
  EXPECT_EQ(check.unexpected, (std::vector<std::string>{"ids", "mask"}));
  EXPECT_EQ(check.mismatched.size(), 2u);
  const std::string message = check.message("ckpt", "the checkpoint");
  EXPECT_NE(message.find("1 missing, 2 unexpected, 2 mismatched"), std::string::npos) << message;
  EXPECT_NE(message.find("embed.weight: checkpoint has [37, 11] Float, model expects [11, 37] Float"),
            std::string::npos) << message;
  EXPECT_NE(message.find("layers.0.weight: checkpoint has [13, 7] BFloat16, model expects [13, 7] Float"),
            std::string::npos) << message;
  EXPECT_THROWS_WITH(fsdp::ckpt::check_strict(reader, expected), "missing from the checkpoint (1):\n    head.weight");
  EXPECT_THROWS_WITH(fsdp::ckpt::check_strict(reader, expected), "unexpected in the checkpoint (2):\n    ids\n    mask");
}

TEST(CheckpointSaveLocal, RejectsPiecesThatDoNotTileTheTensor) {
  TempDir tmp;
  const at::Tensor w = make_tensor({10}, at::kFloat, 1);
  auto piece = [&](int64_t b, int64_t e) { return TensorPiece{"w", {10}, at::kFloat, b, w.slice(0, b, e)}; };
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "a", {{piece(0, 4)}, {piece(6, 10)}}),
                     "no rank holds elements [4, 6) of 'w'");
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "a", {{piece(0, 6)}, {piece(4, 10)}}),
                     "ranks 0 and 1 both hold elements [4, 6) of 'w'");
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "a", {{piece(0, 6)}, {}}), "no rank holds elements [6, 10) of 'w'");
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "a", {{piece(0, 5)}, {TensorPiece{"w", {2, 5}, at::kFloat, 5, w.slice(0, 5)}}}),
                     "ranks disagree about tensor 'w': rank 0 says shape [10] Float, rank 1 says shape [2, 5] Float");
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "a", {{TensorPiece{"w", {10}, at::kHalf, 0, w}}}),
                     "rank 0: piece of 'w' at element 0 holds Float data but declares dtype Half");
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "a", {{TensorPiece{"w", {10}, at::kFloat, 5, w}}}),
                     "piece of 'w' covers elements [5, 15) but the tensor has 10 elements");
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "a", {{TensorPiece{"c", {1}, at::kComplexFloat, 0, at::zeros({1}, at::kComplexFloat)}}}),
                     "cannot be stored in safetensors");
  // Nothing was left behind by the failed saves.
  EXPECT_TRUE(fs::is_empty(tmp.path()));
  // Empty tensors and ranks without pieces are fine.
  fsdp::ckpt::save_local(tmp / "b", {{piece(0, 10), TensorPiece{"e", {0, 4}, at::kFloat, 0, at::empty({0})}}, {}});
  const Reader reader = Reader::open(tmp / "b");
  EXPECT_EQ(reader.read_full("e").sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(reader.index().files.size(), 1u);
}

TEST(CheckpointSaveLocal, OverwriteProtectionAndTargetErrors) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  auto pieces = [](float v) {
    return std::vector<std::vector<TensorPiece>>{{TensorPiece{"w", {3}, at::kFloat, 0, at::full({3}, v)}}};
  };
  SaveOptions first;
  first.step = 1;
  fsdp::ckpt::save_local(dir, pieces(1), first);

  SaveOptions second;
  second.step = 2;
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(dir, pieces(2), second),
                     "checkpoint directory '" + dir + "' already exists; pass overwrite=true");
  EXPECT_EQ(Reader::open(dir).step(), 1);

  // A save that fails midway with overwrite leaves the old checkpoint whole.
  second.overwrite = true;
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(dir, {{TensorPiece{"w", {3}, at::kFloat, 0, at::ones({2})}}}, second),
                     "no rank holds elements [2, 3) of 'w'");
  EXPECT_EQ(Reader::open(dir).step(), 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);

  fsdp::ckpt::save_local(dir, pieces(2), second);
  const Reader reader = Reader::open(dir);
  EXPECT_EQ(reader.step(), 2);
  EXPECT_TRUE(at::equal(reader.read_full("w"), at::full({3}, 2.f)));
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1)
      << "the replaced checkpoint must be removed";

  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "no/such/parent/ckpt", pieces(1)),
                     "parent directory '" + (tmp / "no/such/parent") + "' does not exist");
  fsdp::ckpt::write_file_atomic(tmp / "file", "x", false);
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "file/ckpt", pieces(1)), "' is not a directory");
  fs::create_directory(tmp / "mine");
  fsdp::ckpt::write_file_atomic(tmp / "mine/notes.txt", "precious", false);
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "mine", pieces(1), second),
                     "refusing to replace '" + (tmp / "mine") + "': it is a non-empty directory without index.json");
  EXPECT_TRUE(fs::exists(tmp / "mine/notes.txt"));
}

TEST(CheckpointSaveLocal, HookFailureBeforeIndexLeavesNoCheckpoint) {
  TempDir tmp;
  fsdp::ckpt::testing::set_save_hook([](int, fsdp::ckpt::testing::SavePhase phase, const std::string&) {
    if (phase == fsdp::ckpt::testing::SavePhase::kBeforeIndex) throw std::runtime_error("disk full (injected)");
  });
  EXPECT_THROWS_WITH(fsdp::ckpt::save_local(tmp / "ckpt", {{TensorPiece{"w", {1}, at::kFloat, 0, at::ones({1})}}}),
                     "disk full (injected)");
  fsdp::ckpt::testing::set_save_hook(nullptr);
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}
