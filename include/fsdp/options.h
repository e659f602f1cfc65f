#pragma once
// User-facing policies of fully_shard, in LibTorch's builder style:
//
//   fsdp::FullyShardOptions()
//       .strategy(fsdp::ShardingStrategy::kFullShard)
//       .mp(fsdp::MixedPrecisionPolicy().param_dtype(at::kBFloat16))
//
// Each field documents its default. Checks live in validate(), which
// fully_shard calls, so a bad combination fails at wrap time, not mid-step.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Optional.h>
#include <torch/arg.h>

#include <functional>
#include <iosfwd>
#include <memory>
#include <vector>

#include "fsdp/comm/compression.h"
#include "fsdp/comm/process_group.h"

namespace torch::nn {
class Module;
}

namespace fsdp {

// How a unit's parameters, gradients and optimizer state are split.
enum class ShardingStrategy {
  // ZeRO-3: parameters, gradients and optimizer state sharded; parameters
  // are gathered for forward and again for backward.
  kFullShard,
  // ZeRO-2: like kFullShard, but parameters stay gathered from forward until
  // the end of backward (no re-gather in backward; more memory).
  kShardGradOp,
  // DDP: nothing sharded; gradients are all-reduced.
  kNoShard,
  // kFullShard inside each shard group of a 2-D mesh, replicated across
  // groups (gradients reduce-scattered, then all-reduced across replicas).
  kHybridShard,
  // kShardGradOp inside each shard group, replicated across groups.
  kHybridShardZero2,
};

const char* to_string(ShardingStrategy strategy);
// Writes to_string(strategy), e.g. for logs and test names.
std::ostream& operator<<(std::ostream& os, ShardingStrategy strategy);

// Dtypes for the unsharded (compute) copy of the parameters and for gradient
// reduction. The sharded master parameters, the gradients the optimizer sees
// and the optimizer state keep the parameters' own dtype (usually fp32).
struct MixedPrecisionPolicy {
  /// Dtype of all-gather and compute. Default: the parameter dtype.
  /// Example: `.param_dtype(at::kBFloat16)`.
  TORCH_ARG(c10::optional<at::ScalarType>, param_dtype) = c10::nullopt;
  /// Dtype of gradient reduction. Default: `param_dtype` if set, else the
  /// parameter dtype. Example: `.reduce_dtype(at::kFloat)` to reduce in fp32
  /// while computing in bf16.
  TORCH_ARG(c10::optional<at::ScalarType>, reduce_dtype) = c10::nullopt;
  /// Dtype the unit's floating-point outputs are cast to. Default: unchanged.
  TORCH_ARG(c10::optional<at::ScalarType>, output_dtype) = c10::nullopt;
  /// Cast floating-point forward inputs to `param_dtype`. Default: true.
  TORCH_ARG(bool, cast_forward_inputs) = true;
  /// Dtype of the unit's floating-point buffers. Default: unchanged.
  TORCH_ARG(c10::optional<at::ScalarType>, buffer_dtype) = c10::nullopt;
};

// Where sharded parameters and gradients live between uses.
struct OffloadPolicy {
  /// Keep sharded parameters and gradients in host memory; the optimizer
  /// steps on the CPU. Default: false.
  TORCH_ARG(bool, offload_params) = false;
  /// Use pinned host memory for the offloaded shards (CUDA only). Default:
  /// true.
  TORCH_ARG(bool, pin_memory) = true;
};

// Compressed communication (ZeRO++'s qwZ and qgZ; fsdp/comm/compression.h).
// Only what travels is approximate: the sharded master parameters, the
// gradients the optimizer sees once reduced, and the optimizer state stay in
// their own dtype, and summation is in fp32. Each choice compresses one
// kind of collective, so a hybrid mesh can compress only its inter-node hop
// (`replicate_grads`).
struct CommCompression {
  /// Parameters in every all-gather of a unit, the k-group's backward
  /// re-gather included. The gathered copy every rank computes with is the
  /// decoded one (identical on every rank). Default: as they are.
  TORCH_ARG(Compression, weights) = Compression();
  /// Gradients in the reduce-scatter over the shard group (an all-to-all of
  /// encoded rows, summed in fp32). Default: as they are.
  TORCH_ARG(Compression, grads) = Compression();
  /// Gradients in the all-reduce across replicas: kNoShard's only reduction,
  /// and the inter-node hop of kHybridShard and kHybridShardZero2. Default:
  /// as they are.
  TORCH_ARG(Compression, replicate_grads) = Compression();
};

struct FullyShardOptions {
  /// The one argument fully_shard needs goes in the constructor, as in
  /// torch::nn::LinearOptions(in, out): the ranks to shard over, or, for the
  /// hybrid strategies, the 2-D mesh (whose world group is then the group).
  /// Both convert implicitly, so `fully_shard(model, world)` works too.
  FullyShardOptions() = default;
  FullyShardOptions(ProcessGroupPtr group)  // NOLINT: implicit by design
      : process_group_(std::move(group)) {}
  FullyShardOptions(DeviceMesh mesh);  // NOLINT: implicit by design
  /// Sets `mesh` below, and the process group to the mesh's world.
  FullyShardOptions& mesh(DeviceMesh mesh);

  /// The ranks to shard over. Default: none; fully_shard then requires one.
  TORCH_ARG(ProcessGroupPtr, process_group) = nullptr;
  /// For the hybrid strategies: the 2-D mesh, as make_hybrid_mesh returns it.
  /// Default: none; with only `process_group` set, fully_shard builds
  /// make_hybrid_mesh_from_env(process_group): one shard group per node of
  /// LOCAL_WORLD_SIZE ranks, read from the launcher's environment.
  TORCH_ARG(std::shared_ptr<DeviceMesh>, mesh) = nullptr;
  /// Default: kFullShard.
  TORCH_ARG(ShardingStrategy, strategy) = ShardingStrategy::kFullShard;
  /// Free the gathered parameters after forward and re-gather them in
  /// backward. Default: true for nested units, false for the root (its
  /// parameters are needed first in backward anyway). Ignored by
  /// kShardGradOp and kNoShard.
  TORCH_ARG(c10::optional<bool>, reshard_after_forward) = c10::nullopt;
  /// FSDP2's integer `reshard_after_forward` (ZeRO++ hpZ): after forward, a
  /// unit that reshards keeps its parameters sharded over groups of k
  /// consecutive ranks of its shard group instead of over the whole group, so
  /// the backward all-gather runs within the k-group (k times more memory
  /// between forward and backward than a full reshard). k must divide the
  /// shard group size. k == 1 means keep the full parameters (like
  /// `reshard_after_forward(false)`); k == the shard group size is a plain
  /// reshard. Default: 0 (unset: follow `reshard_after_forward`). Has no
  /// effect on units that do not reshard (the root by default). Example:
  /// `.reshard_after_forward_group_size(ranks_per_node)`.
  TORCH_ARG(int, reshard_after_forward_group_size) = 0;
  /// Mixed precision. Default: off (compute in the parameter dtype).
  TORCH_ARG(MixedPrecisionPolicy, mp) = MixedPrecisionPolicy();
  /// CPU offload of shards. Default: off.
  TORCH_ARG(OffloadPolicy, offload) = OffloadPolicy();
  /// Compressed all-gathers and gradient reductions. Default: off.
  TORCH_ARG(CommCompression, compression) = CommCompression();
  /// Issue the next unit's all-gather before the current unit computes
  /// (forward) and the previous unit's before its backward. Default: true.
  TORCH_ARG(bool, prefetch) = true;
  /// The most units whose all-gather may be in flight or gathered ahead of
  /// use at once. Bounds the memory prefetching costs. Default: 2.
  TORCH_ARG(int, max_inflight_all_gathers) = 2;
  /// Run the gradient reduce-scatters on a group of their own: a sibling of
  /// the shard group over the same ranks, made once by fully_shard. On NCCL
  /// that is a second communicator with its own CUDA stream, so a backward
  /// prefetch all-gather runs beside the previous unit's reduce-scatter
  /// instead of queuing behind it; the compute stream waits on each through
  /// events. On Gloo it is a second worker thread. Costs one more
  /// communicator (NCCL's buffers). Default: on for NCCL groups with
  /// kFullShard or kHybridShard (the strategies that gather in backward);
  /// off for the others, and for Gloo (on a CPU the second lane competes
  /// with compute for the same cores and measured no gain:
  /// docs/performance.md).
  TORCH_ARG(c10::optional<bool>, separate_reduce_scatter_group) = c10::nullopt;
  /// Broadcast rank 0's buffers to every rank at wrap time. Default: true.
  TORCH_ARG(bool, sync_buffers) = true;
  /// Broadcast rank 0's parameters (and buffers) to every rank at wrap time,
  /// for users who load weights on rank 0 only. With deferred init, each
  /// module's freshly initialized parameters are broadcast before sharding.
  /// Default: false.
  TORCH_ARG(bool, sync_module_states) = false;
  /// Deferred initialization (see docs/deferred-init.md): called on each
  /// module whose own parameters are deferred (fsdp::defer_init), in module
  /// pre-order, after its parameters got (uninitialized) storage; it must
  /// fill them. Default: none: Linear, Embedding, LayerNorm (and the other
  /// LibTorch modules with reset_parameters()) reset themselves; any other
  /// module with deferred parameters is an error.
  /// Example: `.param_init_fn([](torch::nn::Module& m) { ... })`.
  TORCH_ARG(std::function<void(torch::nn::Module&)>, param_init_fn) = nullptr;
  /// Modules whose parameters (their whole subtrees) are not sharded: they
  /// stay full on every rank and out of FSDP's collectives; the user keeps
  /// them in sync (e.g. all-reduces their gradients). Default: none.
  TORCH_ARG(std::vector<std::shared_ptr<torch::nn::Module>>, ignored_modules) = {};
  /// Single parameters treated like ignored modules. Default: none.
  TORCH_ARG(std::vector<at::Tensor>, ignored_params) = {};

 public:
  // Throws c10::Error naming the bad field, its value and the fix.
  void validate() const;
};

// Per-unit overrides of the root's FullyShardOptions, for
// UnitModule::set_unit_options. Only these choices can differ between units;
// each field left unset follows the root's options. Checked by fully_shard,
// against the root's strategy, before any unit is sharded.
//
//   model->head->set_unit_options(fsdp::UnitOptions().reshard_after_forward(false));
struct UnitOptions {
  /// Default: the root's `reshard_after_forward`.
  TORCH_ARG(c10::optional<bool>, reshard_after_forward) = c10::nullopt;
  /// Default: the root's `reshard_after_forward_group_size`.
  TORCH_ARG(c10::optional<int>, reshard_after_forward_group_size) = c10::nullopt;
  /// Default: the root's `mp` (the whole policy is replaced, not merged).
  TORCH_ARG(c10::optional<MixedPrecisionPolicy>, mp) = c10::nullopt;
  /// Default: the root's `prefetch`.
  TORCH_ARG(c10::optional<bool>, prefetch) = c10::nullopt;
  /// Keep each of the unit's parameters whole on one rank of its shard
  /// group, balanced by size, instead of splitting every parameter across
  /// ranks (FSDP2's `shard_placement_fn`): for optimizers that need whole
  /// matrices, such as Muon or Shampoo. On its owner a parameter (and its
  /// `.grad()`) has its full shape; elsewhere it is empty, so an optimizer
  /// skips parameters with no elements. Gradients are reduced to the owner,
  /// and its update reaches the others at the next all-gather. Shards then
  /// grow by up to the largest parameter (docs/using-libfsdp.md). Refused
  /// with kNoShard, which shards nothing. Default: false.
  TORCH_ARG(bool, keep_params_whole) = false;

 public:
  // Throws c10::Error naming the bad field, its value and the fix.
  void validate(ShardingStrategy strategy) const;
};

}  // namespace fsdp
