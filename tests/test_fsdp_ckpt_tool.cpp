// build/bin/fsdp-ckpt, driven as a user would: inspect, verify, consolidate,
// export, reshard and import a checkpoint saved for 3 ranks, and the errors
// for bad input. (import-dcp and export-dcp against PyTorch itself:
// tests/test_fsdp2_peer.cpp.) Outputs are re-read with the library's own readers and compared.

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint/atomic_file.h"
#include "checkpoint/index.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/checkpoint/save.h"
#include "harness/child_process.h"
#include "harness/file_damage.h"
#include "harness/shell_command.h"
#include "harness/temp_dir.h"

namespace fs = std::filesystem;
using fsdp::ckpt::Reader;
using fsdp::ckpt::TensorPiece;

namespace {

using fsdp::testing::CommandRun;
using fsdp::testing::contains;
using fsdp::testing::TempDir;

// Runs fsdp-ckpt with `args` (already shell-quoted where needed), stdout and stderr together.
CommandRun fsdp_ckpt(const std::string& args) {
  return fsdp::testing::run_command(std::string(FSDP_BIN_DIR) + "/fsdp-ckpt " + args);
}

std::vector<std::pair<std::string, at::Tensor>> model() {
  auto gen = [](std::vector<int64_t> shape, at::ScalarType dtype, double seed) {
    const int64_t n = c10::multiply_integers(shape);
    return at::arange(n, at::kDouble).mul(1.3).add(seed).sin().mul(50).to(dtype).reshape(shape);
  };
  return {{"tok_embed.weight", gen({61, 16}, at::kFloat, 1)},
          {"blocks.0.mlp.weight", gen({32, 16}, at::kBFloat16, 2)},
          {"blocks.0.mlp.bias", gen({3}, at::kHalf, 3)},
          {"optim.exp_avg.tok_embed.weight", gen({61, 16}, at::kDouble, 4)},
          {"optim.step", at::scalar_tensor(77, at::kLong)}};
}

// Saves model() at world size 3 (even flat splits) at `step`.
void save_model(const std::string& dir, int64_t step = 77) {
  std::vector<std::vector<TensorPiece>> by_rank(3);
  for (const auto& [name, full] : model()) {
    if (full.dim() == 0) {
      by_rank[0].push_back({name, {}, full.scalar_type(), 0, full.reshape({-1})});
      continue;
    }
    const int64_t n = full.numel(), chunk = (n + 2) / 3;
    for (int r = 0; r < 3; ++r) {
      const int64_t b = std::min(n, r * chunk), e = std::min(n, b + chunk);
      by_rank[r].push_back({name, full.sizes().vec(), full.scalar_type(), b, full.reshape({-1}).slice(0, b, e)});
    }
  }
  fsdp::ckpt::SaveOptions options;
  options.step = step;
  options.extras_json = R"({"lr": 0.001})";
  fsdp::ckpt::save_local(dir, by_rank, options);
}

}  // namespace

TEST(FsdpCkptTool, HelpDocumentsEverySubcommand) {
  const CommandRun run = fsdp_ckpt("--help");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  for (const char* word : {"inspect", "verify", "consolidate", "export", "reshard", "import",
                           "import-dcp", "export-dcp"})
    EXPECT_TRUE(contains(run.output, word)) << word << "\n" << run.output;
  const CommandRun reshard_help = fsdp_ckpt("reshard --help");
  EXPECT_TRUE(contains(reshard_help.output, "--world-size")) << reshard_help.output;
  EXPECT_TRUE(contains(reshard_help.output, "--overwrite")) << reshard_help.output;
  EXPECT_NE(fsdp_ckpt("").exit_code, 0);
}

TEST(FsdpCkptTool, InspectPrintsTheTable) {
  TempDir tmp;
  save_model(tmp / "ckpt");
  const CommandRun run = fsdp_ckpt("inspect " + tmp / "ckpt");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output, "world size   3")) << run.output;
  EXPECT_TRUE(contains(run.output, "step         77")) << run.output;
  EXPECT_TRUE(contains(run.output, "\"lr\":0.001")) << run.output;
  EXPECT_TRUE(contains(run.output, "tok_embed.weight")) << run.output;
  EXPECT_TRUE(contains(run.output, "[61, 16]")) << run.output;
  EXPECT_TRUE(contains(run.output, "BF16")) << run.output;
  EXPECT_TRUE(contains(run.output, "7.6 KiB")) << run.output;  // 61*16 doubles
  EXPECT_TRUE(contains(run.output, "5 tensors")) << run.output;

  const CommandRun missing = fsdp_ckpt("inspect " + tmp / "nope");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(contains(missing.output, "fsdp-ckpt: error: fsdp: checkpoint directory '" + tmp / "nope" + "' does not exist"))
      << missing.output;
}

TEST(FsdpCkptTool, VerifyFindsCorruptionByFileAndTensor) {
  TempDir tmp;
  const std::string dir = tmp / "ckpt";
  save_model(dir);
  const CommandRun ok = fsdp_ckpt("verify " + dir);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(contains(ok.output, "OK: 5 tensors, 13 pieces")) << ok.output;

  // Flip one byte of rank 2's piece of blocks.0.mlp.weight.
  const Reader reader = Reader::open(dir);
  const auto& t = reader.index().tensors[reader.index().find("blocks.0.mlp.weight")];
  const auto& piece = t.pieces.at(2);
  const std::string file = dir + "/" + reader.index().files[piece.file].name;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(piece.byte_offset + 3);
    f.put('\x7f');
  }
  const CommandRun bad = fsdp_ckpt("verify " + dir);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_TRUE(contains(bad.output, "'" + file + "' is corrupted: tensor 'blocks.0.mlp.weight'")) << bad.output;
}

TEST(FsdpCkptTool, ConsolidateWritesOneStandardSafetensorsFile) {
  TempDir tmp;
  save_model(tmp / "ckpt");
  const std::string out = tmp / "model.safetensors";
  const CommandRun run = fsdp_ckpt("consolidate " + tmp / "ckpt" + " --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto loaded = fsdp::ckpt::safetensors::load_file(out);
  std::map<std::string, at::Tensor> by_name(loaded.begin(), loaded.end());
  ASSERT_EQ(by_name.size(), model().size());
  for (const auto& [name, full] : model()) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name].sizes(), full.sizes()) << name;
    EXPECT_TRUE(at::equal(by_name[name], full)) << name;
  }
  EXPECT_EQ(fsdp::ckpt::safetensors::read_header(out).metadata.at("libfsdp_step"), "77");

  const CommandRun again = fsdp_ckpt("consolidate " + tmp / "ckpt" + " --out " + out);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(contains(again.output, "already exists; pass overwrite (--overwrite)")) << again.output;
  EXPECT_EQ(fsdp_ckpt("consolidate " + tmp / "ckpt" + " --out " + out + " --overwrite").exit_code, 0);
  const CommandRun no_dir =
      fsdp_ckpt("consolidate " + tmp / "ckpt" + " --out " + tmp / "no/where.safetensors");
  EXPECT_EQ(no_dir.exit_code, 1);
  EXPECT_TRUE(contains(no_dir.output, "directory '" + tmp / "no" + "' does not exist")) << no_dir.output;
}

TEST(FsdpCkptTool, ExportTorchIsAPickleThatTorchLoads) {
  TempDir tmp;
  save_model(tmp / "ckpt");
  const std::string out = tmp / "model.pt";
  const CommandRun run = fsdp_ckpt("export " + tmp / "ckpt" + " --format torch --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string bytes = fsdp::ckpt::read_file(out);
  ASSERT_GT(bytes.size(), 4u);
  EXPECT_EQ(bytes.substr(0, 4), std::string("PK\x03\x04", 4)) << "torch.load reads the zip format";
  const c10::IValue value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  ASSERT_TRUE(value.isGenericDict());
  const auto dict = value.toGenericDict();
  ASSERT_EQ(dict.size(), model().size());
  for (const auto& [name, full] : model()) {
    ASSERT_TRUE(dict.contains(name)) << name;
    const at::Tensor got = dict.at(name).toTensor();
    EXPECT_EQ(got.scalar_type(), full.scalar_type()) << name;
    EXPECT_TRUE(at::equal(got, full)) << name;
  }
  const CommandRun bad_format =
      fsdp_ckpt("export " + tmp / "ckpt" + " --format onnx --out " + tmp / "m.onnx");
  EXPECT_NE(bad_format.exit_code, 0);
  EXPECT_TRUE(contains(bad_format.output, "onnx")) << bad_format.output;
  EXPECT_FALSE(fs::exists(tmp / "m.onnx"));
}

TEST(FsdpCkptTool, ReshardRewritesForAnotherWorldSize) {
  TempDir tmp;
  save_model(tmp / "ckpt");
  for (int world_size : {1, 2, 5}) {
    const std::string out = tmp / ("ws" + std::to_string(world_size));
    const CommandRun run = fsdp_ckpt("reshard " + tmp / "ckpt" + " --world-size " +
                                     std::to_string(world_size) + " --out " + out);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const Reader reader = Reader::open(out);
    EXPECT_EQ(reader.saved_world_size(), world_size);
    EXPECT_EQ(reader.step(), 77);
    EXPECT_EQ(reader.extras_json(), R"({"lr":0.001})");
    reader.verify_all();
    for (const auto& [name, full] : model()) {
      EXPECT_TRUE(at::equal(reader.read_full(name), full)) << name << " at world size " << world_size;
      const auto& pieces = reader.index().tensors[reader.index().find(name)].pieces;
      EXPECT_EQ(static_cast<int64_t>(pieces.size()), std::min<int64_t>(world_size, full.numel())) << name;
    }
  }
  // blocks.0.mlp.bias (3 elements) at world size 5: ranks 3 and 4 hold none of it.
  const Reader five = Reader::open(tmp / "ws5");
  EXPECT_EQ(five.index().files.size(), 5u);

  const CommandRun exists =
      fsdp_ckpt("reshard " + tmp / "ckpt" + " --world-size 2 --out " + tmp / "ws2");
  EXPECT_EQ(exists.exit_code, 1);
  EXPECT_TRUE(contains(exists.output, "already exists")) << exists.output;
  const CommandRun replaced =
      fsdp_ckpt("reshard " + tmp / "ws5" + " --world-size 4 --out " + tmp / "ws2 --overwrite");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_EQ(Reader::open(tmp / "ws2").saved_world_size(), 4);
  // The range is given with readable bounds (it once printed a 309-digit
  // number: issue #13, point 13).
  const CommandRun zero =
      fsdp_ckpt("reshard " + tmp / "ckpt" + " --world-size 0 --out " + tmp / "ws0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_TRUE(contains(zero.output, "--world-size")) << zero.output;
  EXPECT_TRUE(contains(zero.output, "1048576")) << zero.output;  // CLI11 2.1 and 2.4 word it differently
  EXPECT_LT(zero.output.size(), 400u) << zero.output;
}

// Issue #13, point 9: no converter may write into the checkpoint it reads,
// nor replace a directory that holds it; with --overwrite that destroyed it.
TEST(FsdpCkptTool, AnOutputInsideTheInputIsRefusedAndTheCheckpointSurvives) {
  TempDir tmp;
  save_model(tmp / "ckpt");
  const std::string rank_file = tmp / "ckpt/rank-00000-of-00003.safetensors";
  ASSERT_TRUE(fs::exists(rank_file));
  const CommandRun into_rank_file =
      fsdp_ckpt("consolidate " + tmp / "ckpt" + " --out " + rank_file + " --overwrite");
  EXPECT_EQ(into_rank_file.exit_code, 1);
  EXPECT_TRUE(contains(into_rank_file.output, "is inside the checkpoint")) << into_rank_file.output;
  // The same place spelled another way.
  const CommandRun dotted =
      fsdp_ckpt("export " + tmp / "ckpt" + " --out " + tmp / "ckpt/../ckpt/m.pt --overwrite");
  EXPECT_EQ(dotted.exit_code, 1);
  EXPECT_TRUE(contains(dotted.output, "is inside the checkpoint")) << dotted.output;
  const CommandRun onto_itself =
      fsdp_ckpt("reshard " + tmp / "ckpt" + " --world-size 2 --out " + tmp / "ckpt --overwrite");
  EXPECT_EQ(onto_itself.exit_code, 1);
  EXPECT_TRUE(contains(onto_itself.output, "is inside the checkpoint")) << onto_itself.output;
  fs::create_directories(tmp / "outer");
  fs::rename(tmp / "ckpt", tmp / "outer/ckpt");
  const CommandRun over_parent = fsdp_ckpt("reshard " + tmp / "outer/ckpt" +
                                           " --world-size 2 --out " + tmp / "outer --overwrite");
  EXPECT_EQ(over_parent.exit_code, 1);
  EXPECT_TRUE(contains(over_parent.output, "holds the checkpoint")) << over_parent.output;

  const Reader reader = Reader::open(tmp / "outer/ckpt");
  reader.verify_all();
  for (const auto& [name, full] : model()) EXPECT_TRUE(at::equal(reader.read_full(name), full)) << name;
}

// Issue #13, points 14 and 15: given a run dir, fsdp-ckpt works on its
// newest checkpoint that verifies (as fsdp-train --resume does), verify
// checks every checkpoint in it, and clean removes what killed saves left.
TEST(FsdpCkptTool, ARunDirMeansItsNewestCheckpointThatVerifies) {
  TempDir tmp;
  const std::string run = tmp / "run";
  fs::create_directories(run + "/checkpoints");
  save_model(run + "/checkpoint", 77);
  save_model(run + "/checkpoints/step-00000080", 80);
  fsdp::testing::flip_byte(run + "/checkpoints/step-00000080/rank-00002-of-00003.safetensors", -1);
  fs::create_directories(run + "/checkpoints/step-00000090.partial-1-ab");
  std::ofstream(run + "/checkpoints/step-00000090.partial-1-ab/rank-00000-of-00003.safetensors")
      << std::string(1000, 'x');

  const CommandRun inspect = fsdp_ckpt("inspect " + run);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "skipped (did not verify) " + run + "/checkpoints/step-00000080"))
      << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "using its newest checkpoint that verifies, '" + run +
                                           "/checkpoint' (step 77)"))
      << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "step         77")) << inspect.output;

  const CommandRun verify = fsdp_ckpt("verify " + run);
  EXPECT_EQ(verify.exit_code, 1) << verify.output;
  EXPECT_TRUE(contains(verify.output, "FAILED: '" + run + "/checkpoints/step-00000080'")) << verify.output;
  EXPECT_TRUE(contains(verify.output, "verified in '" + run + "/checkpoint'")) << verify.output;
  EXPECT_TRUE(contains(verify.output, "partial: '" + run + "/checkpoints/step-00000090.partial-1-ab'"))
      << verify.output;
  EXPECT_TRUE(contains(verify.output, "1 of 2 checkpoints in run dir")) << verify.output;

  // clean waits for a run that holds the run dir, then removes only partials.
  const int fd = ::open((run + "/.fsdp-train.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const CommandRun busy = fsdp_ckpt("clean " + run);
  EXPECT_EQ(busy.exit_code, 1) << busy.output;
  EXPECT_TRUE(contains(busy.output, "an fsdp-train run is using")) << busy.output;
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000090.partial-1-ab"));
  ::close(fd);
  const CommandRun clean = fsdp_ckpt("clean " + run);
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_TRUE(contains(clean.output, "1 partial checkpoint removed")) << clean.output;
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step-00000090.partial-1-ab"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step-00000080")) << "clean removes partials only";
  EXPECT_EQ(Reader::open(run + "/checkpoint").step(), 77);
}

// Issue #35, point 4: clean of a path that is no run dir said "0 partial
// checkpoints removed" and exited 0, as for a clean run dir.
TEST(FsdpCkptTool, CleanRefusesAMissingPathOrARegularFile) {
  TempDir tmp;
  const CommandRun missing = fsdp_ckpt("clean " + tmp / "nonexistent");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(contains(missing.output, "run dir '" + tmp / "nonexistent" +
                                           "' does not exist; give "
                                           "the directory fsdp-train wrote (its --run-dir)"))
      << missing.output;
  const std::string file = tmp / "notes.txt";
  std::ofstream(file) << "not a run dir\n";
  const CommandRun regular = fsdp_ckpt("clean " + file);
  EXPECT_EQ(regular.exit_code, 1) << regular.output;
  EXPECT_TRUE(contains(regular.output, "'" + file + "' is not a directory; give a run dir"))
      << regular.output;
  EXPECT_FALSE(contains(missing.output + regular.output, "partial checkpoints removed"));
}

TEST(FsdpCkptTool, ImportIsTheInverseOfConsolidate) {
  TempDir tmp;
  save_model(tmp / "ckpt");
  ASSERT_EQ(
      fsdp_ckpt("consolidate " + tmp / "ckpt" + " --out " + tmp / "whole.safetensors").exit_code,
      0);
  for (int world_size : {1, 2}) {
    const std::string out = tmp / ("ws" + std::to_string(world_size));
    const CommandRun run = fsdp_ckpt("import " + tmp / "whole.safetensors" + " --out " + out +
                                     (world_size == 1 ? "" : " --world-size 2"));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const Reader reader = Reader::open(out);
    reader.verify_all();
    EXPECT_EQ(reader.saved_world_size(), world_size);
    EXPECT_EQ(reader.step(), 77);
    EXPECT_EQ(reader.extras_json(), R"({"lr":0.001})");
    const auto tensors = model();
    ASSERT_EQ(reader.index().tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& [name, full] = tensors[i];
      EXPECT_EQ(reader.index().tensors[i].name, name) << "tensors keep their order";
      EXPECT_TRUE(at::equal(reader.read_full(name), full))
          << name << " at world size " << world_size;
    }
  }
  const CommandRun exists =
      fsdp_ckpt("import " + tmp / "whole.safetensors" + " --out " + tmp / "ws1");
  EXPECT_EQ(exists.exit_code, 1);
  EXPECT_TRUE(contains(exists.output, "already exists")) << exists.output;
}

// A file of whole tensors from elsewhere: no libfsdp metadata (step 0, no
// extras), and "optim/<param>/<field>" entries are that parameter's state.
TEST(FsdpCkptTool, ImportReadsOptimizerStateByNameAndRefusesBadMetadata) {
  TempDir tmp;
  const at::Tensor weight = at::arange(6, at::kFloat).reshape({2, 3});
  fsdp::ckpt::safetensors::save_file(tmp / "plain.safetensors",
                                     {{"w", weight}, {"optim/w/exp_avg", weight * 2}});
  ASSERT_EQ(fsdp_ckpt("import " + tmp / "plain.safetensors" + " --out " + tmp / "plain").exit_code,
            0);
  const Reader plain = Reader::open(tmp / "plain");
  EXPECT_EQ(plain.step(), 0);
  EXPECT_EQ(plain.extras_json(), "{}");
  EXPECT_EQ(plain.index().params_with_optimizer_state, std::vector<std::string>{"w"});
  EXPECT_TRUE(at::equal(plain.read_full("optim/w/exp_avg"), weight * 2));

  fsdp::ckpt::safetensors::save_file(tmp / "bad.safetensors", {{"w", weight}},
                                     {{"libfsdp_step", "7x"}});
  const CommandRun bad_step =
      fsdp_ckpt("import " + tmp / "bad.safetensors" + " --out " + tmp / "bad");
  EXPECT_EQ(bad_step.exit_code, 1);
  EXPECT_TRUE(contains(bad_step.output,
                       "__metadata__ libfsdp_step must be a step number (an integer >= 0), "
                       "got '7x'"))
      << bad_step.output;
  fsdp::ckpt::safetensors::save_file(tmp / "bad.safetensors", {{"w", weight}},
                                     {{"libfsdp_extras", "[1]"}},
                                     /*overwrite=*/true);
  const CommandRun bad_extras =
      fsdp_ckpt("import " + tmp / "bad.safetensors" + " --out " + tmp / "bad");
  EXPECT_EQ(bad_extras.exit_code, 1);
  EXPECT_TRUE(
      contains(bad_extras.output, "libfsdp_extras must be the text of a JSON object; got an array"))
      << bad_extras.output;
  EXPECT_FALSE(fs::exists(tmp / "bad"));
}

// What a failed export-dcp left in `dir`: its output or the scratch file
// between the two halves ("" if nothing).
namespace {
std::string left_behind(const std::string& dir) {
  std::string left;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (contains(name, "dcp")) left += name + " ";
  }
  return left;
}
}  // namespace

// What a user without python3, or with the wrong directory, is told;
// nothing is left behind. (Without PyTorch, and the DCP round trip itself:
// tests/test_fsdp2_peer.cpp, which has a python3.)
TEST(FsdpCkptTool, TheDcpCommandsNameWhatIsMissing) {
  TempDir tmp;
  save_model(tmp / "ckpt");
  const CommandRun not_dcp = fsdp_ckpt("import-dcp " + tmp / "ckpt" + " --out " + tmp / "imported");
  EXPECT_EQ(not_dcp.exit_code, 1);
  EXPECT_TRUE(contains(
      not_dcp.output,
      "'" + tmp / "ckpt" + "' is not a PyTorch Distributed Checkpoint: it has no .metadata file"))
      << not_dcp.output;
  const CommandRun no_python = fsdp_ckpt("export-dcp " + tmp / "ckpt" + " --out " +
                                         tmp / "dcp --python " + tmp / "no-python3");
  EXPECT_EQ(no_python.exit_code, 1);
  EXPECT_TRUE(contains(no_python.output,
                       "export-dcp needs python3 with PyTorch 2.3+ to read and write DCP, and "
                       "could not run '" +
                           tmp / "no-python3" + "': No such file or directory"))
      << no_python.output;
  EXPECT_TRUE(contains(no_python.output, "pass --python")) << no_python.output;
  EXPECT_EQ(left_behind(tmp.path()), "");
}
