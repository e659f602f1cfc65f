// fsdp-ckpt: inspect, verify and convert libfsdp sharded checkpoints.
// A thin command line over include/fsdp/checkpoint/; it needs no process
// group and runs in one process on any machine that sees the directory.

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>

#include "commands.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/error_message.h"

namespace {

using fsdp_ckpt::checkpoint_of;
using fsdp_ckpt::clean;
using fsdp_ckpt::export_dcp;
using fsdp_ckpt::import_dcp;
using fsdp_ckpt::inspect;
using fsdp_ckpt::verify;

// A bound that reads as a number in the range error (CLI::PositiveNumber
// printed DBL_MAX's 309 digits), far above any real world size.
constexpr int kMaxWorldSize = 1 << 20;

constexpr const char* kDirHelp =
    "checkpoint directory, or a run dir: then its newest checkpoint that verifies";

// What the subcommands were given; each reads the fields it declared.
struct Args {
  std::string dir, out, format = "torch";
  bool overwrite = false;
  int world_size = 0;
  fsdp_ckpt::DcpOptions dcp;
};

struct Subcommands {
  CLI::App* inspect = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* consolidate = nullptr;
  CLI::App* export_torch = nullptr;
  CLI::App* reshard = nullptr;
  CLI::App* import_file = nullptr;
  CLI::App* import_dcp = nullptr;
  CLI::App* export_dcp = nullptr;
  CLI::App* clean = nullptr;
};

// The subcommands that only read the checkpoint.
void add_read_commands(CLI::App& app, Args& args, Subcommands& commands) {
  commands.inspect = app.add_subcommand(
      "inspect", "Print the world size, step, extras and a table of every tensor: shape, dtype, size, pieces.");
  commands.inspect->add_option("DIR", args.dir, kDirHelp)->required();

  commands.verify = app.add_subcommand(
      "verify",
      "Read every byte of every rank file and check every xxh64 block checksum and file size.\n"
      "Exits 1 naming each corrupted or truncated file and tensor.");
  commands.verify->add_option("DIR", args.dir,
                              "checkpoint directory, or a run dir: then every checkpoint in it")
      ->required();

  commands.clean = app.add_subcommand(
      "clean",
      "Remove the partial checkpoints (*.partial-*) that killed saves left in a run dir and its\n"
      "checkpoints/. Refused while an fsdp-train run holds the run dir.");
  commands.clean->add_option("RUN_DIR", args.dir, "run directory")->required();
}

// The subcommands that write a new file or checkpoint to --out.
void add_write_commands(CLI::App& app, Args& args, Subcommands& commands) {
  commands.consolidate = app.add_subcommand(
      "consolidate",
      "Write one standard safetensors file holding every tensor whole at its global shape.\n"
      "Streams tensor by tensor: memory stays bounded by the largest tensor.");
  commands.consolidate->add_option("DIR", args.dir, kDirHelp)->required();
  commands.consolidate->add_option("--out,-o", args.out, "output .safetensors file")->required();
  commands.consolidate->add_flag("--overwrite", args.overwrite, "replace --out if it exists");

  commands.export_torch = app.add_subcommand(
      "export",
      "Write the full tensors in another framework's format. --format torch writes a file that\n"
      "Python's torch.load() and C++ torch::pickle_load() read: a dict {name: tensor}.");
  commands.export_torch->add_option("DIR", args.dir, kDirHelp)->required();
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
  commands.reshard->add_option("DIR", args.dir, kDirHelp)->required();
  commands.reshard->add_option("--world-size,-n", args.world_size, "ranks of the new checkpoint")
      ->required()
      ->check(CLI::Range(1, kMaxWorldSize));
  commands.reshard->add_option("--out,-o", args.out, "output checkpoint directory")->required();
  commands.reshard->add_flag("--overwrite", args.overwrite,
                             "replace --out if it is an existing checkpoint");
}

// --world-size of the commands that write a new checkpoint.
void add_world_size_option(CLI::App& command, Args& args) {
  command
      .add_option("--world-size,-n", args.world_size,
                  "ranks the checkpoint is split for (any world size loads it)")
      ->default_val(1)
      ->check(CLI::Range(1, kMaxWorldSize));
}

// The options of the commands that run dcp_convert.py.
void add_converter_options(CLI::App& command, Args& args) {
  command
      .add_option("--python", args.dcp.python,
                  "python3 with PyTorch 2.3+, which reads and writes DCP")
      ->capture_default_str();
  command
      .add_option("--model-key", args.dcp.model_key,
                  "where the DCP state dict holds the model's (a dotted path)")
      ->capture_default_str();
  command
      .add_option("--optim-key", args.dcp.optim_key, "where it holds the optimizer's; '' for none")
      ->capture_default_str();
}

// The subcommands that bring checkpoints in from other formats, and PyTorch's DCP out.
void add_interchange_commands(CLI::App& app, Args& args, Subcommands& commands) {
  commands.import_file = app.add_subcommand(
      "import",
      "Write a checkpoint from one safetensors file of whole tensors: the inverse of consolidate.\n"
      "Step and extras come from its __metadata__ libfsdp_step and libfsdp_extras when present;\n"
      "tensors named optim/<param>/<field> are optimizer state.");
  commands.import_file->add_option("FILE", args.dir, "input .safetensors file")
      ->required()
      ->check(CLI::ExistingFile);
  commands.import_file->add_option("--out,-o", args.out, "output checkpoint directory")->required();
  add_world_size_option(*commands.import_file, args);
  commands.import_file->add_flag("--overwrite", args.overwrite,
                                 "replace --out if it is an existing checkpoint");

  commands.import_dcp = app.add_subcommand(
      "import-dcp",
      "Import a PyTorch Distributed Checkpoint (the .distcp files and .metadata that an FSDP2 "
      "loop\n"
      "saves from get_state_dict(model, optimizer)): the model, and the optimizer's state by\n"
      "parameter name; step = the optimizer's. param_groups are not imported. Runs\n"
      "libexec/libfsdp/dcp_convert.py on --python (docs/checkpoints.md).");
  commands.import_dcp->add_option("DCP_DIR", args.dir, "DCP checkpoint directory")->required();
  commands.import_dcp->add_option("--out,-o", args.out, "output checkpoint directory")->required();
  add_world_size_option(*commands.import_dcp, args);
  commands.import_dcp->add_flag("--overwrite", args.overwrite,
                                "replace --out if it is an existing checkpoint");
  add_converter_options(*commands.import_dcp, args);

  commands.export_dcp = app.add_subcommand(
      "export-dcp",
      "Write the checkpoint as a PyTorch Distributed Checkpoint that an FSDP2 loop loads at any\n"
      "world size: {model: ..., optim: {state: ...}}, no param_groups (docs/checkpoints.md).\n"
      "Runs libexec/libfsdp/dcp_convert.py on --python.");
  commands.export_dcp->add_option("DIR", args.dir, kDirHelp)->required();
  commands.export_dcp->add_option("--out,-o", args.out, "output DCP directory (must not exist)")
      ->required();
  add_converter_options(*commands.export_dcp, args);
}

// Runs the one parsed subcommand; throws on failure.
int run_subcommand(const Subcommands& commands, const Args& args) {
  if (commands.verify->parsed()) return verify(args.dir);
  if (commands.clean->parsed()) return clean(args.dir);
  if (commands.import_dcp->parsed())
    return import_dcp(args.dir, args.out, args.world_size, args.overwrite, args.dcp);
  if (commands.import_file->parsed()) {
    fsdp::ckpt::import_safetensors(args.dir, args.world_size, args.out, args.overwrite);
    fmt::print("wrote {} for {} ranks\n", args.out, args.world_size);
    return 0;
  }
  const std::string dir = checkpoint_of(args.dir);
  if (commands.inspect->parsed()) return inspect(dir);
  if (commands.consolidate->parsed()) {
    fsdp::ckpt::consolidate(dir, args.out, args.overwrite);
    fmt::print("wrote {}\n", args.out);
  } else if (commands.export_torch->parsed()) {
    fsdp::ckpt::export_torch(dir, args.out, args.overwrite);
    fmt::print("wrote {}\n", args.out);
  } else if (commands.reshard->parsed()) {
    fsdp::ckpt::reshard(dir, args.world_size, args.out, args.overwrite);
    fmt::print("wrote {} for {} ranks\n", args.out, args.world_size);
  } else if (commands.export_dcp->parsed()) {
    return export_dcp(dir, args.out, args.dcp);
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
  add_interchange_commands(app, args, commands);
  CLI11_PARSE(app, argc, argv);

  try {
    return run_subcommand(commands, args);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fsdp-ckpt: error: {}\n", fsdp::error_message(e));
  }
  return 1;
}
