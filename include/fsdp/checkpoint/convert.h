#pragma once
// Offline conversions of a sharded checkpoint, in one process with no
// process group (these back `fsdp-ckpt consolidate | export | reshard |
// import`).
// Each reads tensor by tensor, so memory stays bounded by the largest tensor
// (export_torch excepted: a pickle is written in one piece).

#include <string>

namespace fsdp::ckpt {

// One standard safetensors file holding every tensor whole, at its global
// shape, in save order. __metadata__ has "format": "pt", "libfsdp_step" and
// "libfsdp_extras" (the extras as a JSON string). Written atomically; an
// existing `out` needs `overwrite`.
void consolidate(const std::string& dir, const std::string& out, bool overwrite);

// A file Python's torch.load (and torch::pickle_load) reads: the zip-based
// pickle of a dict {name: tensor} with every tensor whole, written by
// torch::jit::pickle_save. Holds all tensors in memory while it writes.
void export_torch(const std::string& dir, const std::string& out, bool overwrite);

// Rewrites the checkpoint for `world_size` ranks: every tensor is split
// evenly by flattened element, rank r holding [r*c, min((r+1)*c, n)) with
// c = ceil(n / world_size) (the last ranks may hold less, or nothing). Step
// and extras are kept. `out` follows the same commit protocol as save().
void reshard(const std::string& dir, int world_size, const std::string& out, bool overwrite);

// The inverse of consolidate(): a checkpoint for `world_size` ranks (split as
// reshard() splits) holding every tensor of the safetensors `file`, in file
// order, under its key. Step and extras come from __metadata__'s
// "libfsdp_step" and "libfsdp_extras" when present (0 and {} otherwise);
// tensors named "optim/<param>/<field>" are that parameter's optimizer state
// (fsdp/checkpoint/training_state.h). Reads one tensor at a time; `out`
// follows the commit protocol of save().
void import_safetensors(const std::string& file, int world_size, const std::string& out,
                        bool overwrite);

}  // namespace fsdp::ckpt
