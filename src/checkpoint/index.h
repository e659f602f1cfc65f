#pragma once
// The checkpoint index (index.json): the one file that makes a directory a
// checkpoint. It is written last, after every rank file is durable, and names
// for each tensor its global shape, dtype and the pieces that hold its
// flattened elements. The format is specified in docs/checkpoint-format.md.

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::ckpt {

constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "libfsdp-checkpoint";
constexpr const char* kIndexFileName = "index.json";

// One rank's data file (a safetensors file in the checkpoint directory).
struct FileInfo {
  std::string name;  // relative to the checkpoint directory, e.g. "rank-00000-of-00002.safetensors"
  int rank = 0;
  int64_t bytes = 0;  // total file size when written
  // xxh64 of the file's safetensors header: the 8-byte length and the JSON
  // after it, padding included. Absent in checkpoints saved before it was
  // recorded. See [Note: every byte of a rank file is checked].
  std::optional<uint64_t> header_checksum;
};

// A contiguous range of a tensor's flattened (C-order) elements, stored as a
// 1-D entry of one file.
struct PieceInfo {
  int file = 0;            // index into Index::files
  std::string key;         // the safetensors key, "<name>@<flat_begin>"
  int64_t flat_begin = 0;  // elements [flat_begin, flat_end) of the flattened tensor
  int64_t flat_end = 0;
  int64_t byte_offset = 0;                // absolute offset of the piece's first byte in the file
  std::vector<uint64_t> block_checksums;  // xxh64 of each block_bytes block, see checksum.h

  int64_t numel() const { return flat_end - flat_begin; }
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // global shape; [] for a scalar
  at::ScalarType dtype = at::kFloat;
  std::vector<PieceInfo> pieces;  // sorted by flat_begin; tile [0, numel) exactly

  int64_t numel() const;
};

struct Index {
  int format_version = kFormatVersion;
  int world_size = 1;
  int64_t step = 0;
  // The caller's extras: one JSON object, as compact JSON text (see
  // SaveOptions::extras_json).
  std::string extras_json = "{}";
  int64_t checksum_block_bytes = 0;
  std::vector<FileInfo> files;
  std::vector<TensorInfo> tensors;  // in save order
  // The parameters that had optimizer state when the checkpoint was saved
  // (those with "optim/<param>/<field>" entries), sorted, so that a strict
  // load can tell a parameter that lost its state from one that never had
  // any. Absent in checkpoints saved before it was recorded, which load as
  // before.
  std::optional<std::vector<std::string>> params_with_optimizer_state;

  // index.json's text (one member per line).
  std::string to_json() const;
  // Parses and validates (see validate()). `source` names the file in errors,
  // e.g. "checkpoint index '/ckpt/index.json'".
  static Index from_json(const std::string& text, const std::string& source);

  // Checks the invariants a reader relies on: known format and version,
  // unique tensor names, pieces sorted, in range, tiling [0, numel) with no
  // gap or overlap, file indices valid, checksum counts matching piece sizes.
  // Throws c10::Error naming `source`, the tensor and the problem.
  void validate(const std::string& source) const;

  // Position of `name` in tensors, or -1.
  int64_t find(const std::string& name) const;
};

// Reads and validates DIR/index.json. A missing index gets the message that
// the save did not complete; a missing directory says so, and mentions any
// "<dir>.partial-*" left by an interrupted save.
Index read_index(const std::string& dir);

// Writes DIR/index.json atomically (temp + fsync + rename + fsync dir).
void write_index(const std::string& dir, const Index& index);

// Optimizer state is stored as tensors named "optim/<param>/<field>"
// (fsdp/checkpoint/training_state.h): the name of one, and the parameter
// of a name, or nothing for a name that is not optimizer state.
std::string optimizer_entry_name(const std::string& param, const std::string& field);
std::optional<std::string> optimizer_entry_param(const std::string& tensor_name);

// The parameters with optimizer entries among `tensors`, sorted.
std::vector<std::string> params_with_optimizer_entries(const std::vector<TensorInfo>& tensors);

// The safetensors key of a piece: "<name>@<flat_begin>".
std::string piece_key(const std::string& name, int64_t flat_begin);

// "rank-00003-of-00008.safetensors".
std::string rank_file_name(int rank, int world_size);

}  // namespace fsdp::ckpt
