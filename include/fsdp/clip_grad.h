#pragma once
// Gradient clipping across shards.

#include <ATen/core/Tensor.h>

#include <vector>

#include "fsdp/sharded.h"

namespace fsdp {

// Clips the sharded gradients of `root` so that their total norm, taken over
// the full (unsharded) gradients of the whole model, is at most `max_norm`;
// returns that total norm before clipping. `norm_type` is p of the p-norm:
// 2 by default, INFINITY for the max-norm, or any p > 0. The result equals
// torch::nn::utils::clip_grad_norm_ on the unsharded model.
//
// Collective: every rank must call it, after backward returned. Calling it on
// only some ranks makes the others wait and fail at the group's timeout.
double clip_grad_norm_(UnitModule& root, double max_norm, double norm_type = 2.0);

// The same, without waiting for the device: returns the total norm as a
// 0-dim float64 tensor on the gradients' device (on the CPU for a Gloo group
// without host staging), as torch::nn::utils::clip_grad_norm_ does in
// PyTorch. Nothing reads a value back to the host, so a CUDA training step
// that calls it makes no host sync; read the norm (.item<double>()) only
// when you log it. clip_grad_norm_ is this plus that read.
at::Tensor clip_grad_norm_tensor_(UnitModule& root, double max_norm, double norm_type = 2.0);

// The same for parameters this process holds whole (a model without FSDP):
// torch::nn::utils::clip_grad_norm_ without reading the norm back, for a
// CUDA step that makes no host sync. Parameters without a gradient are
// skipped; with none at all the norm is a zero on the CPU.
at::Tensor clip_grad_norm_tensor_(const std::vector<at::Tensor>& parameters, double max_norm,
                                  double norm_type = 2.0);

}  // namespace fsdp
