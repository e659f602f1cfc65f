#pragma once
// Writing a whole checkpoint from one process, each tensor split evenly by
// flattened element over M rank files: what `reshard` (from a checkpoint)
// and `import_safetensors` (from whole tensors) share. Internal to
// src/checkpoint.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/index.h"

namespace fsdp::ckpt::detail {

// Elements [flat_begin, flat_begin + numel) of tensor `tensor_index` of the
// index being written, as a 1-D tensor of its dtype. Called in tensor order.
using ReadElements =
    std::function<at::Tensor(size_t tensor_index, int64_t flat_begin, int64_t numel)>;

// Writes `index` (its tensors declared, with no pieces yet) to `out` for
// index.world_size ranks, rank r holding [r*c, min((r+1)*c, n)) of every
// tensor, c = ceil(n / world_size), and commits it with the protocol of
// save(): staged beside `out`, index.json last, then renamed into place.
// Nothing is left behind on failure.
void write_even_split(Index index, const ReadElements& read, const std::string& out,
                      bool overwrite);

}  // namespace fsdp::ckpt::detail
