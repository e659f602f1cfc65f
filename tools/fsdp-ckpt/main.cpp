// fsdp-ckpt: inspect, verify and convert libfsdp sharded checkpoints.
// A thin command line over include/fsdp/checkpoint/; it needs no process
// group and runs in one process on any machine that sees the directory.

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/error_message.h"

namespace {

using fsdp::ckpt::Reader;

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int inspect(const std::string& dir) {
  const Reader reader = Reader::open(dir);
  const auto& index = reader.index();
  int64_t total_bytes = 0;
  size_t name_width = 6, shape_width = 5;
  for (const auto& t : index.tensors) {
    name_width = std::max(name_width, t.name.size());
    shape_width = std::max(shape_width, shape_text(t.shape).size());
  }
  fmt::print("checkpoint   {}\n", dir);
  fmt::print("format       libfsdp-checkpoint v{}\n", index.format_version);
  fmt::print("world size   {}\n", index.world_size);
  fmt::print("step         {}\n", index.step);
  fmt::print("extras       {}\n", index.extras.dump());
  fmt::print("files        {} (checksum xxh64, {} blocks)\n\n", index.files.size(),
             human_bytes(index.checksum_block_bytes));
  fmt::print("{:<{}}  {:<{}}  {:<5}  {:>12}  {:>6}\n", "tensor", name_width, "shape", shape_width, "dtype",
             "size", "pieces");
  for (const auto& t : index.tensors) {
    const int64_t bytes = t.numel() * static_cast<int64_t>(c10::elementSize(t.dtype));
    total_bytes += bytes;
    fmt::print("{:<{}}  {:<{}}  {:<5}  {:>12}  {:>6}\n", t.name, name_width, shape_text(t.shape), shape_width,
               fsdp::ckpt::safetensors::dtype_name(t.dtype), human_bytes(bytes), t.pieces.size());
  }
  fmt::print("\n{} tensors, {} of data\n", index.tensors.size(), human_bytes(total_bytes));
  return 0;
}

int verify(const std::string& dir) {
  const Reader reader = Reader::open(dir);
  const auto report = reader.verify_all();
  fmt::print("OK: {} tensors, {} pieces, {} verified in '{}'\n", report.tensors, report.pieces,
             human_bytes(report.bytes), dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fsdp-ckpt: inspect, verify and convert libfsdp sharded checkpoints.\n"
      "A checkpoint is a directory with index.json and one safetensors file per saving rank\n"
      "(format: docs/checkpoint-format.md). Nothing here needs the ranks that saved it."};
  app.require_subcommand(1);

  std::string dir, out, format = "torch";
  bool overwrite = false;
  int world_size = 0;

  auto* inspect_cmd = app.add_subcommand(
      "inspect", "Print the world size, step, extras and a table of every tensor: shape, dtype, size, pieces.");
  inspect_cmd->add_option("DIR", dir, "checkpoint directory")->required();

  auto* verify_cmd = app.add_subcommand(
      "verify",
      "Read every byte of every rank file and check every xxh64 block checksum and file size.\n"
      "Exits 1 naming each corrupted or truncated file and tensor.");
  verify_cmd->add_option("DIR", dir, "checkpoint directory")->required();

  auto* consolidate_cmd = app.add_subcommand(
      "consolidate",
      "Write one standard safetensors file holding every tensor whole at its global shape.\n"
      "Streams tensor by tensor: memory stays bounded by the largest tensor.");
  consolidate_cmd->add_option("DIR", dir, "checkpoint directory")->required();
  consolidate_cmd->add_option("--out,-o", out, "output .safetensors file")->required();
  consolidate_cmd->add_flag("--overwrite", overwrite, "replace --out if it exists");

  auto* export_cmd = app.add_subcommand(
      "export",
      "Write the full tensors in another framework's format. --format torch writes a file that\n"
      "Python's torch.load() and C++ torch::pickle_load() read: a dict {name: tensor}.");
  export_cmd->add_option("DIR", dir, "checkpoint directory")->required();
  export_cmd->add_option("--format,-f", format, "output format (torch)")
      ->check(CLI::IsMember({"torch"}))
      ->capture_default_str();
  export_cmd->add_option("--out,-o", out, "output file, e.g. model.pt")->required();
  export_cmd->add_flag("--overwrite", overwrite, "replace --out if it exists");

  auto* reshard_cmd = app.add_subcommand(
      "reshard",
      "Rewrite the checkpoint for M ranks, each tensor split evenly by flattened element\n"
      "(rank r holds [r*c, min((r+1)*c, n)), c = ceil(n/M)). Step and extras are kept.\n"
      "Any world size can load any checkpoint directly; resharding makes each rank's reads\n"
      "touch one file.");
  reshard_cmd->add_option("DIR", dir, "checkpoint directory")->required();
  reshard_cmd->add_option("--world-size,-n", world_size, "ranks of the new checkpoint")
      ->required()
      ->check(CLI::PositiveNumber);
  reshard_cmd->add_option("--out,-o", out, "output checkpoint directory")->required();
  reshard_cmd->add_flag("--overwrite", overwrite, "replace --out if it is an existing checkpoint");

  CLI11_PARSE(app, argc, argv);

  try {
    if (inspect_cmd->parsed()) return inspect(dir);
    if (verify_cmd->parsed()) return verify(dir);
    if (consolidate_cmd->parsed()) {
      fsdp::ckpt::consolidate(dir, out, overwrite);
      fmt::print("wrote {}\n", out);
    } else if (export_cmd->parsed()) {
      fsdp::ckpt::export_torch(dir, out, overwrite);
      fmt::print("wrote {}\n", out);
    } else if (reshard_cmd->parsed()) {
      fsdp::ckpt::reshard(dir, world_size, out, overwrite);
      fmt::print("wrote {} for {} ranks\n", out, world_size);
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fsdp-ckpt: error: {}\n", fsdp::error_message(e));
  }
  return 1;
}
