#pragma once
// Model state dicts of a sharded model: the whole model by name at its
// original shapes (gathered unit by unit), each rank's shards with the
// metadata to place them, and loading a whole state dict back into the
// shards at any world size.
//
//   // rank 0 gets every parameter and buffer, on the CPU; others get {}
//   fsdp::StateDict full = fsdp::full_state_dict(*model);
//   // each rank: its 1-D shards and where they sit, no communication
//   fsdp::ShardedStateDict mine = fsdp::sharded_state_dict(*model);
//   // another run, any world size: rank 0 holds `full`, the others pass {}
//   fsdp::load_full_state_dict(*model, full, fsdp::LoadStateDictOptions().rank0_only(true));
//
// Keys are the original fully qualified names, exactly those of the
// unsharded model's named_parameters() and named_buffers(), so a state dict
// from a plain single-process model loads here and the other way round.
// Optimizer state dicts are in fsdp/optim_state_dict.h.

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fsdp/sharded.h"

namespace fsdp {

// name -> tensor, parameters in named_parameters() order, then buffers.
using StateDict = torch::OrderedDict<std::string, at::Tensor>;

struct FullStateDictOptions {
  /// Only global rank 0 keeps the output; every other rank returns an empty
  /// dict (it still takes part in the gathers). Default true.
  TORCH_ARG(bool, rank0_only) = true;
  /// Put the output tensors in host memory. Default true. With false they
  /// stay on the parameters' device.
  TORCH_ARG(bool, offload_to_cpu) = true;
};

// Tensor-byte accounting of one state dict call on this rank, for memory
// bounds (see [Note: full state dict memory] in src/state_dict/unit_gather.h).
struct StateDictStats {
  int64_t output_bytes = 0;          // bytes of the returned tensors
  int64_t largest_gather_bytes = 0;  // the largest gathered unit buffer (padded)
  int64_t peak_extra_bytes = 0;      // most gather buffers + output alive at once
  int units_gathered = 0;            // all-gathers issued (one per unit and field)
};

// Collective over the model's process group: every rank must call it,
// outside forward and backward. Gathers one unit at a time into a padded
// buffer, copies each parameter out of it (on the keeping ranks only) and
// frees the buffer before the next unit, so the extra memory at any moment
// is one unit plus the output. Buffers are included (not sharded: copied).
StateDict full_state_dict(const UnitModule& root, const FullStateDictOptions& options = {},
                          StateDictStats* stats = nullptr);

// One tensor of a sharded state dict: this rank's run of the flattened full
// tensor, elements [flat_begin, flat_begin + local.numel()).
struct ShardedTensor {
  std::vector<int64_t> full_shape;
  int64_t flat_begin = 0;
  at::Tensor local;  // 1-D, aliases the live parameter (detached); may be empty
  // This rank is the one to write the range when saving; false for replicas
  // (NO_SHARD, hybrid strategies) and for buffers on ranks other than 0.
  bool primary = true;
};
using ShardedStateDict = torch::OrderedDict<std::string, ShardedTensor>;

// Every parameter's local shard and every buffer (whole, at flat_begin 0),
// with no communication and no copy: the tensors alias the model.
ShardedStateDict sharded_state_dict(const UnitModule& root);

struct LoadStateDictOptions {
  /// Only global rank 0's `state_dict` is read; it broadcasts one tensor at
  /// a time and every other rank may pass an empty dict. Default false:
  /// every rank passes the whole dict and keeps its slice, no communication.
  TORCH_ARG(bool, rank0_only) = false;
  /// Every parameter and buffer must be present at its shape, and nothing
  /// else; all problems are reported at once, by name. Default true.
  TORCH_ARG(bool, strict) = true;
};

// The names that do not match between a source of tensors (a state dict, a
// checkpoint) and the model they load into. A strict load throws with
// message(); a non-strict one skips them and returns this.
struct KeyMismatches {
  std::vector<std::string> missing;     // expected by the model, not in the source
  std::vector<std::string> unexpected;  // in the source, not in the model
  std::vector<std::string> mismatched;  // "name: state dict has [4, 3], model has [3, 4]"

  bool ok() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  // Every problem, one per line, empty when ok():
  //   "<subject> does not match the model: 3 problem(s) (1 missing, 1 unexpected,
  //   1 mismatched)", then "missing from <source> (1):", "unexpected in
  //   <source> (1):" and "mismatched (1):", each followed by its entries.
  // `source` names the container, e.g. "the checkpoint" or "the state dict".
  std::string message(const std::string& subject, const std::string& source) const;
};

// What a non-strict load skipped.
using LoadStateDictResult = KeyMismatches;

// Copies each rank's slice of every tensor of a full state dict (for
// example from full_state_dict() or a single-process model) into the
// sharded model, at any world size. Values are converted to the parameter's
// dtype. Collective only with rank0_only. Strict mode throws (on every rank)
// listing every missing, unexpected and mismatched name; otherwise those are
// skipped and returned.
LoadStateDictResult load_full_state_dict(UnitModule& root, const StateDict& state_dict,
                                         const LoadStateDictOptions& options = {});

// Copies a sharded state dict taken at the same world size and sharding
// (sharded_state_dict() of the same configuration) back into the model. No
// communication. Throws naming every tensor whose placement differs.
void load_sharded_state_dict(UnitModule& root, const ShardedStateDict& state_dict);

}  // namespace fsdp
