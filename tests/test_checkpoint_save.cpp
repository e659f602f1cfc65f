// The collective save on N in-process ranks (threads, one Gloo group each):
// save at one world size, load at any other, and every rank learning about
// any rank's failure.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "fsdp/checkpoint/reader.h"
#include "checkpoint/save_hook.h"
#include "fsdp/checkpoint/save.h"
#include "harness/temp_dir.h"
#include "harness/assertions.h"
#include "harness/rank_harness.h"

namespace fs = std::filesystem;
using fsdp::ckpt::Reader;
using fsdp::ckpt::SaveOptions;
using fsdp::ckpt::TensorPiece;
using fsdp::testing::RankContext;
using fsdp::testing::run_ranks;

namespace {

// Each file's directories carry its own prefix, to tell leftovers apart.
class TempDir : public fsdp::testing::TempDir {
 public:
  TempDir() : fsdp::testing::TempDir("fsdp-ckpt-save") {}
};

// The "model": the same full tensors on every rank (same seed).
std::vector<std::pair<std::string, at::Tensor>> full_state() {
  auto gen = [](std::vector<int64_t> shape, at::ScalarType dtype, double seed) {
    const int64_t n = c10::multiply_integers(shape);
    return at::arange(n, at::kDouble).mul(0.731).add(seed).cos().mul(10).to(dtype).reshape(shape);
  };
  return {{"embed.weight", gen({50, 8}, at::kFloat, 1)},
          {"block.0.attn.weight", gen({24, 8}, at::kBFloat16, 2)},
          {"block.0.attn.bias", gen({2}, at::kFloat, 3)},
          {"optim.embed.weight.exp_avg_sq", gen({50, 8}, at::kFloat, 4)},
          {"optim.step", at::scalar_tensor(300, at::kLong)},
          {"buffer.position_ids", at::arange(16, at::kLong)}};
}

bool is_replicated(const std::string& name) { return name == "optim.step" || name.rfind("buffer.", 0) == 0; }

// FSDP-style flat split: rank r holds [r*c, min((r+1)*c, n)), c = ceil(n/ws).
std::pair<int64_t, int64_t> my_range(int64_t n, int rank, int world_size) {
  const int64_t chunk = (n + world_size - 1) / world_size;
  const int64_t begin = std::min(n, rank * chunk);
  return {begin, std::min(n, begin + chunk)};
}

std::vector<TensorPiece> my_pieces(int rank, int world_size) {
  std::vector<TensorPiece> pieces;
  for (const auto& [name, full] : full_state()) {
    if (is_replicated(name)) {
      if (rank == 0) pieces.push_back({name, full.sizes().vec(), full.scalar_type(), 0, full.reshape({-1})});
      continue;
    }
    auto [begin, end] = my_range(full.numel(), rank, world_size);
    pieces.push_back({name, full.sizes().vec(), full.scalar_type(), begin, full.reshape({-1}).slice(0, begin, end)});
  }
  return pieces;
}

void expect_loads_at(const std::string& dir, int world_size) {
  run_ranks(world_size, [&](RankContext& ctx) {
    const Reader reader = Reader::open(dir);
    for (const auto& [name, full] : full_state()) {
      auto [begin, end] = my_range(full.numel(), ctx.rank, ctx.world_size);
      at::Tensor mine = reader.read(name, begin, end - begin);
      TORCH_CHECK(at::equal(mine, full.reshape({-1}).slice(0, begin, end)), "rank ", ctx.rank, ": '", name,
                  "' [", begin, ", ", end, ") differs after loading at world size ", ctx.world_size);
    }
  });
}

}  // namespace

TEST(CheckpointSave, SavesAtTwoRanksAndReadsAnyRange) {
  TempDir tmp;
  const std::string dir = tmp / "step-300";
  run_ranks(2, [&](RankContext& ctx) {
    SaveOptions options;
    options.step = 300;
    options.extras_json = R"({"tokens_seen": 123456})";
    options.checksum_block_bytes = 40;
    fsdp::ckpt::save(*ctx.group, dir, my_pieces(ctx.rank, ctx.world_size), options);
    // Every rank returns only once the checkpoint is complete.
    const Reader reader = Reader::open(dir);
    TORCH_CHECK(reader.step() == 300 && reader.saved_world_size() == 2);
    TORCH_CHECK(reader.extras_json() == R"({"tokens_seen":123456})", reader.extras_json());
  });
  const Reader reader = Reader::open(dir);
  EXPECT_EQ(reader.file_count(), 2);
  EXPECT_EQ(reader.names().size(), full_state().size());
  for (const auto& [name, full] : full_state()) {
    EXPECT_TRUE(at::equal(reader.read_full(name), full)) << name;
    const at::Tensor flat = full.reshape({-1});
    const int64_t n = full.numel();
    for (int64_t begin = 0; begin < n; begin += std::max<int64_t>(1, n / 7)) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{13}, n - begin}) {
        if (begin + count > n) continue;
        ASSERT_TRUE(at::equal(reader.read(name, begin, count), flat.slice(0, begin, begin + count)))
            << name << " [" << begin << ", +" << count << ")";
      }
    }
  }
  reader.verify_all();
  // Nothing but the checkpoint is left in the parent directory.
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);
}

TEST(CheckpointSave, SavedAtThreeRanksLoadsAtOneTwoAndFour) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  run_ranks(3, [&](RankContext& ctx) {
    fsdp::ckpt::save(*ctx.group, dir, my_pieces(ctx.rank, ctx.world_size));
  });
  EXPECT_EQ(Reader::open(dir).saved_world_size(), 3);
  // block.0.attn.bias has 2 elements: rank 2 held nothing of it.
  EXPECT_EQ(Reader::open(dir).piece_count("block.0.attn.bias"), 2);
  const Reader reader = Reader::open(dir);
  for (const auto& [name, full] : full_state()) EXPECT_TRUE(at::equal(reader.read_full(name), full)) << name;
  expect_loads_at(dir, 2);
  expect_loads_at(dir, 4);
}

TEST(CheckpointSave, EveryRankSeesOneRanksWriteFailure) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  fsdp::ckpt::testing::set_save_hook([](int rank, fsdp::ckpt::testing::SavePhase phase, const std::string& path) {
    if (rank == 1 && phase == fsdp::ckpt::testing::SavePhase::kBeforeDataFile)
      throw std::runtime_error("cannot create '" + path + "': No space left on device (injected)");
  });
  std::atomic<int> failed{0};
  std::mutex mutex;
  std::vector<std::string> messages(3);
  run_ranks(3, [&](RankContext& ctx) {
    try {
      fsdp::ckpt::save(*ctx.group, dir, my_pieces(ctx.rank, ctx.world_size));
    } catch (const c10::Error& e) {
      ++failed;
      std::lock_guard<std::mutex> lock(mutex);
      messages[ctx.rank] = e.what_without_backtrace();
    }
  });
  fsdp::ckpt::testing::set_save_hook(nullptr);
  EXPECT_EQ(failed.load(), 3) << "every rank must throw";
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(messages[r].find("checkpoint save to '" + dir + "' failed"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("1 of 3 ranks failed to write their data"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("rank 1: cannot create '"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("rank-00001-of-00003.safetensors': No space left on device (injected)"),
              std::string::npos) << messages[r];
  }
  // No checkpoint and no staging directory are left behind.
  EXPECT_TRUE(fs::is_empty(tmp.path()));
  EXPECT_THROWS_WITH(Reader::open(dir), "does not exist");
}

TEST(CheckpointSave, EveryRankSeesAnotherRanksBadPiece) {
  TempDir tmp;
  std::atomic<int> failed{0};
  run_ranks(2, [&](RankContext& ctx) {
    auto pieces = my_pieces(ctx.rank, ctx.world_size);
    if (ctx.rank == 1) pieces.push_back({"complex", {2}, at::kComplexFloat, 0, at::zeros({2}, at::kComplexFloat)});
    if (ctx.rank == 0) pieces[0].data = pieces[0].data.slice(0, 0, 10);  // leaves a gap in embed.weight
    try {
      fsdp::ckpt::save(*ctx.group, tmp / "ckpt", pieces);
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      TORCH_CHECK(what.find("rank 1: dtype ComplexFloat cannot be stored in safetensors") != std::string::npos,
                  what);
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 2);
  // With the bad dtype gone, the gap is reported to every rank by name.
  failed = 0;
  run_ranks(2, [&](RankContext& ctx) {
    auto pieces = my_pieces(ctx.rank, ctx.world_size);
    if (ctx.rank == 0) pieces[0].data = pieces[0].data.slice(0, 0, 10);
    try {
      fsdp::ckpt::save(*ctx.group, tmp / "ckpt", pieces);
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      TORCH_CHECK(what.find("no rank holds elements [10, 200) of 'embed.weight'") != std::string::npos, what);
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 2);
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(CheckpointSave, OverwriteProtectionOnEveryRank) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  std::atomic<int> refused{0};
  run_ranks(2, [&](RankContext& ctx) {
    SaveOptions options;
    options.step = 1;
    fsdp::ckpt::save(*ctx.group, dir, my_pieces(ctx.rank, ctx.world_size), options);
    options.step = 2;
    try {
      fsdp::ckpt::save(*ctx.group, dir, my_pieces(ctx.rank, ctx.world_size), options);
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      TORCH_CHECK(what.find("failed before writing anything: checkpoint directory '" + dir +
                            "' already exists; pass overwrite=true") != std::string::npos, what);
      ++refused;
    }
    TORCH_CHECK(Reader::open(dir).step() == 1);
    ctx.group->barrier()->wait();  // everyone has checked before the overwrite
    options.overwrite = true;
    fsdp::ckpt::save(*ctx.group, dir, my_pieces(ctx.rank, ctx.world_size), options);
    TORCH_CHECK(Reader::open(dir).step() == 2);
  });
  EXPECT_EQ(refused.load(), 2);
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 1);
}

TEST(CheckpointSave, MissingParentIsNamedOnEveryRank) {
  TempDir tmp;
  std::atomic<int> failed{0};
  run_ranks(2, [&](RankContext& ctx) {
    try {
      fsdp::ckpt::save(*ctx.group, tmp / "missing/ckpt", my_pieces(ctx.rank, ctx.world_size));
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      TORCH_CHECK(what.find("parent directory '" + (tmp / "missing") + "' does not exist") != std::string::npos,
                  what);
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 2);
}
