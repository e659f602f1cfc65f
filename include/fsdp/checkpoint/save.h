#pragma once
// The collective sharded save. Every rank passes the pieces it holds; the
// result is one checkpoint directory that any world size can load (reader.h).
//
//   std::vector<fsdp::ckpt::TensorPiece> mine = ...;  // from the FSDP state dict
//   fsdp::ckpt::SaveOptions options;
//   options.step = 1000;
//   fsdp::ckpt::save(*group, "ckpt/step-1000", mine, options);
//
// Layout on disk and the commit protocol: docs/checkpoint-format.md.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp {
class ProcessGroup;
}

namespace fsdp::ckpt {

// 4 MiB: large enough that hashing is not dominated by per-call overhead,
// small enough that reading one element verifies at most 4 MiB.
constexpr int64_t kDefaultChecksumBlockBytes = 4 << 20;

// A contiguous range of one tensor's flattened (C-order) elements held by
// this rank: elements [flat_begin, flat_begin + data.numel()).
// A sharded tensor (an FSDP parameter, or optimizer state sharded like it)
// is passed by every rank with its own range, possibly empty; together the
// ranges must cover the tensor exactly once. A replicated tensor (a buffer,
// the optimizer's `step`) is passed by one rank (rank 0) as one piece with
// flat_begin 0 covering all of it.
struct TensorPiece {
  std::string name;
  std::vector<int64_t> global_shape;  // [] for a scalar
  at::ScalarType dtype = at::kFloat;  // must equal data's dtype
  int64_t flat_begin = 0;
  at::Tensor data;  // numel = flat_end - flat_begin; any shape, device or layout (copied to CPU)
};

struct SaveOptions {
  // Recorded in the index (Reader::step()).
  int64_t step = 0;
  // What the caller wants back at load time (Reader::extras_json()): e.g. the
  // data loader position, the learning-rate schedule, the model config. It
  // must be the text of one JSON object, which is stored as index.json's
  // "extras" (any nesting, any JSON types), e.g.
  //   options.extras_json = "{\"data_position\": " + std::to_string(position) + "}";
  // or, with a JSON library of your own, `my_json.dump()`. libfsdp takes
  // text so that its headers need no JSON library. An empty string means {}.
  std::string extras_json = "{}";
  // Replace an existing checkpoint at `dir`. Without it, saving to an
  // existing path fails on every rank before anything is written.
  bool overwrite = false;
  // Block size of the xxh64 checksums (bytes): a read verifies whole blocks.
  // docs/checkpoint-format.md describes them.
  int64_t checksum_block_bytes = kDefaultChecksumBlockBytes;
  // Write the data files around the page cache (O_DIRECT, where the
  // filesystem has it). It saves the CPU time of copying the data into the
  // cache, which a save in the background (AsyncSaver, which sets it) takes
  // from training; the next read of the checkpoint then comes from the disk.
  bool bypass_page_cache = false;
};

// Collective over `group`: every rank must call it with the same dir and
// options. The directory must be on a filesystem every rank sees.
// Returns only when the checkpoint is complete and durable on every rank's
// view, or throws on EVERY rank with one message naming each failed rank and
// its cause. A failed or killed save never damages an existing checkpoint at
// `dir`: data is written to "<dir>.partial-<id>" and moved into place last.
void save(ProcessGroup& group, const std::string& dir, const std::vector<TensorPiece>& my_pieces,
          const SaveOptions& options = {});

// The same checkpoint written by one process for `pieces_by_rank.size()`
// ranks (rank r's pieces at index r), with the same checks and commit
// protocol. For tools, tests and single-process programs.
void save_local(const std::string& dir, const std::vector<std::vector<TensorPiece>>& pieces_by_rank,
                const SaveOptions& options = {});

}  // namespace fsdp::ckpt
