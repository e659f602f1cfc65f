// Whole checkpoints in one process: reads of arbitrary ranges across pieces,
// corruption, truncation, a damaged header, a missing index, strict key
// checks, and the save checks that need no process group (save_local writes
// every rank's file from one process).

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
#include <random>

#include "checkpoint/atomic_file.h"
#include "checkpoint/index.h"
#include "checkpoint/save_hook.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/checkpoint/save.h"
#include "fsdp/checkpoint/strict_check.h"
#include "harness/assertions.h"
#include "harness/file_damage.h"
#include "harness/sample_tensors.h"
#include "harness/temp_dir.h"

namespace fs = std::filesystem;
using fsdp::ckpt::Reader;
using fsdp::ckpt::SaveOptions;
using fsdp::ckpt::TensorPiece;
using fsdp::testing::flip_byte;
using fsdp::testing::make_tensor;

namespace {

// Each file's directories carry its own prefix, to tell leftovers apart.
class TempDir : public fsdp::testing::TempDir {
 public:
  TempDir() : fsdp::testing::TempDir("fsdp-ckpt-test") {}
};

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
  // A copy, not a reference: the reader is reopened below.
  const fsdp::ckpt::PieceInfo piece = piece_of(reader, "embed.weight", 1);
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
