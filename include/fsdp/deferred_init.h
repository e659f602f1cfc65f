#pragma once
// Deferred initialization: models too big for one rank. See
// docs/deferred-init.md for the guide.
//
//   Block make_block(const Config& c) { Block b(c); fsdp::defer_init(*b); return b; }
//   ...                       // build the model one unit at a time, deferring each
//   auto model = fsdp::fully_shard(Model(...), options);   // materializes the shards
//
// fully_shard initializes deferred parameters one module at a time, in module
// pre-order (the order LibTorch modules are usually constructed in): it gives
// the module's own parameters storage, runs FullyShardOptions::param_init_fn
// on it (or the module's own reset_parameters()), keeps this rank's slice of
// each parameter in its unit's shard and frees the rest. No rank holds more
// than its shards plus one module's full parameters.
//
// Why not the meta device: LibTorch 1.13 cannot move a module to at::kMeta
// (Module::to calls set_data, which refuses to change a parameter between the
// CPU and Meta tensor types), and factory functions ignore dispatch-key
// guards. A parameter whose storage was released keeps its shape, dtype,
// device and identity, which is all sharding needs.

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}

namespace fsdp {

// Releases the storage of every parameter of `module` (recursively); they
// keep shape, dtype, device and identity. Buffers are kept (they are not
// sharded; keep them small or register them after construction).
void defer_init(torch::nn::Module& module);

// True for a parameter released by defer_init and not yet materialized.
bool is_deferred(const at::Tensor& tensor);

}  // namespace fsdp
