#pragma once
// libfsdp: Fully Sharded Data Parallel (ZeRO-3) training for LibTorch.
//
//   fsdp/comm/process_group.h  process groups and collectives (Gloo, NCCL)
//   fsdp/comm/launch_env.h     rank and world from torchrun/mpirun/srun env
//   fsdp/options.h             FullyShardOptions and its policies
//   fsdp/sharded.h             fsdp::Sharded<M>: marks a unit in a model
//   fsdp/fully_shard.h         fully_shard(), no_sync
//   fsdp/clip_grad.h           clip_grad_norm_ across shards
//   fsdp/introspection.h       shard placement and memory accounting
//   fsdp/shard_layout.h        the flat shard arithmetic

#include "fsdp/clip_grad.h"
#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/fully_shard.h"
#include "fsdp/introspection.h"
#include "fsdp/options.h"
#include "fsdp/shard_layout.h"
#include "fsdp/sharded.h"
