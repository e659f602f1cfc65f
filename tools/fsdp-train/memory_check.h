#pragma once
// Refusing, before anything is allocated, a model that cannot fit.
//
// [Note: the memory check before building the model]
// Unchecked, `--layers 99999999` runs until the machine's memory is gone, and
// `--width 65536` dies late, in the allocator. Each rank first builds the
// full fp32 model (so the initial weights do not depend on the world size),
// then keeps its shards and trains with sharded gradients and AdamW's two
// moments. So a rank needs at least the full model's bytes while building
// (one block's with --deferred-init), plus 4 more shard-sized tensors, plus
// the activations of one micro-batch. That lower bound must fit in a rank's
// own limit (RLIMIT_DATA) and, times the ranks on this node, in the memory
// the kernel calls available (MemAvailable). Sizes are computed in floating
// point, so absurd options give a large number, not a wrapped one.
// fsdp-plan gives the full picture; this check only refuses what cannot work.

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "train_options.h"

namespace fsdp_train {

// A lower bound on one rank's peak bytes for these options.
double estimated_rank_bytes(const TrainOptions& o, const BatchLayout& layout);

// "" when one rank fits in its own limit (rank_limit_bytes: RLIMIT_DATA, as
// fsdp-run --memory-limit sets it) and ranks_on_node ranks fit in
// available_bytes, else a message with the numbers and the fix. none skips
// either check.
std::string check_fits_in_memory(const TrainOptions& o, const BatchLayout& layout,
                                 int ranks_on_node, std::optional<int64_t> available_bytes,
                                 std::optional<int64_t> rank_limit_bytes = std::nullopt);

// For an error that is a failed allocation (LibTorch's "can't allocate
// memory", std::bad_alloc): what ran out (the rank's limit, if it has one)
// and what to change. "" for any other error.
std::string out_of_memory_hint(const std::exception& e);

// This process's data limit (RLIMIT_DATA), or none when unlimited.
std::optional<int64_t> rank_memory_limit_bytes();

// "" when every rank on this node can hold the corpus `data_path` (""
// means the small default corpus), else a message with its size, what is
// needed and what is available. fsdp-train keeps the corpus in memory on
// each rank, and holds it twice while reading it, so a file is checked
// before it is read: a 64 GiB file once gave std::bad_alloc after 25 s.
std::string check_corpus_fits(const std::string& data_path, int ranks_on_node,
                              std::optional<int64_t> available_bytes);

// A "Name: N kB" field of a /proc file (/proc/meminfo, /proc/self/status) in
// bytes, or none where it cannot be read.
std::optional<int64_t> proc_kib_field_bytes(const char* path, const char* field);

// MemAvailable from /proc/meminfo, or none where it cannot be read.
std::optional<int64_t> available_memory_bytes();

}  // namespace fsdp_train
