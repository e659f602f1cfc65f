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
  fmt::print("extras       {}\n", index.extras_json);
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

// What the subcommands were given; each reads the fields it declared.
struct Args {
  std::string dir, out, format = "torch";
  bool overwrite = false;
  int world_size = 0;
};

struct Subcommands {
  CLI::App* inspect = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* consolidate = nullptr;
  CLI::App* export_torch = nullptr;
  CLI::App* reshard = nullptr;
};

// The subcommands that only read the checkpoint.
void add_read_commands(CLI::App& app, Args& args, Subcommands& commands) {
  commands.inspect = app.add_subcommand(
      "inspect", "Print the world size, step, extras and a table of every tensor: shape, dtype, size, pieces.");
  commands.inspect->add_option("DIR", args.dir, "checkpoint directory")->required();

  commands.verify = app.add_subcommand(
      "verify",
      "Read every byte of every rank file and check every xxh64 block checksum and file size.\n"
      "Exits 1 naming each corrupted or truncated file and tensor.");
  commands.verify->add_option("DIR", args.dir, "checkpoint directory")->required();
}

// The subcommands that write a new file or checkpoint to --out.
void add_write_commands(CLI::App& app, Args& args, Subcommands& commands) {
  commands.consolidate = app.add_subcommand(
      "consolidate",
      "Write one standard safetensors file holding every tensor whole at its global shape.\n"
      "Streams tensor by tensor: memory stays bounded by the largest tensor.");
  commands.consolidate->add_option("DIR", args.dir, "checkpoint directory")->required();
  commands.consolidate->add_option("--out,-o", args.out, "output .safetensors file")->required();
  commands.consolidate->add_flag("--overwrite", args.overwrite, "replace --out if it exists");

  commands.export_torch = app.add_subcommand(
      "export",
      "Write the full tensors in another framework's format. --format torch writes a file that\n"
      "Python's torch.load() and C++ torch::pickle_load() read: a dict {name: tensor}.");
  commands.export_torch->add_option("DIR", args.dir, "checkpoint directory")->required();
  commands.export_torch->add_option("--format,-f", args.format, "output format (torch)")
      ->check(CLI::IsMember({"torch"}))
      ->capture_default_str();
  commands.export_torch->add_option("--out,-o", args.out, "output file, e.g. model.pt")->required();
  commands.export_torch->add_flag("--overwrite", args.overwrite, "replace --out if it exists");

  commands.reshard = app.add_subcommand(
      "reshard",
      "Rewrite the checkpoint for M ranks, each tensor split evenly by flattened element\n"
      "(rank r holds [r*c, min((r+1)*c, n)), c = ceil(n/M)). Step and extras are kept.\n"
      "Any world size can load any checkpoint directly; resharding makes each rank's reads\n"
      "touch one file.");
  commands.reshard->add_option("DIR", args.dir, "checkpoint directory")->required();
  commands.reshard->add_option("--world-size,-n", args.world_size, "ranks of the new checkpoint")
      ->required()
      ->check(CLI::PositiveNumber);
  commands.reshard->add_option("--out,-o", args.out, "output checkpoint directory")->required();
  commands.reshard->add_flag("--overwrite", args.overwrite,
                             "replace --out if it is an existing checkpoint");
}

// Runs the one parsed subcommand; throws on failure.
int run_subcommand(const Subcommands& commands, const Args& args) {
  if (commands.inspect->parsed()) return inspect(args.dir);
  if (commands.verify->parsed()) return verify(args.dir);
  if (commands.consolidate->parsed()) {
    fsdp::ckpt::consolidate(args.dir, args.out, args.overwrite);
    fmt::print("wrote {}\n", args.out);
  } else if (commands.export_torch->parsed()) {
    fsdp::ckpt::export_torch(args.dir, args.out, args.overwrite);
    fmt::print("wrote {}\n", args.out);
  } else if (commands.reshard->parsed()) {
    fsdp::ckpt::reshard(args.dir, args.world_size, args.out, args.overwrite);
    fmt::print("wrote {} for {} ranks\n", args.out, args.world_size);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fsdp-ckpt: inspect, verify and convert libfsdp sharded checkpoints.\n"
      "A checkpoint is a directory with index.json and one safetensors file per saving rank\n"
      "(format: docs/checkpoint-format.md). Nothing here needs the ranks that saved it."};
  app.require_subcommand(1);
  Args args;
  Subcommands commands;
  add_read_commands(app, args, commands);
  add_write_commands(app, args, commands);
  CLI11_PARSE(app, argc, argv);

  try {
    return run_subcommand(commands, args);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fsdp-ckpt: error: {}\n", fsdp::error_message(e));
  }
  return 1;
}
