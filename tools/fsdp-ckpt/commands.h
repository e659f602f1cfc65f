#pragma once
// The fsdp-ckpt commands that are more than one library call. Each prints
// its result on stdout, returns the exit code, and throws on failure.

#include <cstdint>
#include <string>

namespace fsdp_ckpt {

// inspect: the index as a table.
int inspect(const std::string& dir);

// verify: every byte of a checkpoint, or of every checkpoint in a run dir
// (exit 1 naming each that fails), listing leftover partial saves.
int verify(const std::string& dir);

// clean: removes a run dir's partial saves, unless a run holds the dir.
int clean(const std::string& dir);

// The checkpoint a command works on: `dir` itself, or, for a run dir, its
// newest checkpoint that verifies (said on stderr).
std::string checkpoint_of(const std::string& dir);

// What import-dcp and export-dcp pass to dcp_convert.py.
struct DcpOptions {
  std::string python = "python3";   // an interpreter with PyTorch 2.3+
  std::string model_key = "model";  // where the DCP state dict holds the model's (dotted path)
  std::string optim_key = "optim";  // ... and the optimizer's; "" for none
};

// import-dcp: a PyTorch Distributed Checkpoint as a libfsdp checkpoint for
// `world_size` ranks. See [Note: DCP through the user's Python].
int import_dcp(const std::string& dcp_dir, const std::string& out, int world_size, bool overwrite,
               const DcpOptions& options);

// export-dcp: a libfsdp checkpoint as a PyTorch Distributed Checkpoint.
int export_dcp(const std::string& dir, const std::string& out, const DcpOptions& options);

// "1.5 MiB".
std::string human_bytes(int64_t bytes);

}  // namespace fsdp_ckpt
