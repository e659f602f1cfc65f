#pragma once
// libfsdp: Fully Sharded Data Parallel (ZeRO-3) training for LibTorch.
//
//   fsdp/comm/process_group.h  process groups and collectives (Gloo, NCCL)
//   fsdp/comm/launch_env.h     rank and world from torchrun/mpirun/srun env
//   fsdp/comm/job_rendezvous.h ranks meet, agree they can start, then make the world
//   fsdp/comm/compression.h    bf16 / block-int8 collectives (CommCompression)
//   fsdp/options.h             FullyShardOptions and its policies
//   fsdp/sharded.h             fsdp::Sharded<M>: marks a unit in a model
//   fsdp/checkpointed.h        fsdp::Checkpointed<M>: activation checkpointing
//   fsdp/cpu_allocation_counter.h  live and peak bytes of CPU tensor memory
//   fsdp/fully_shard.h         fully_shard(), no_sync
//   fsdp/clip_grad.h           clip_grad_norm_ across shards
//   fsdp/fused_adamw.h         FusedAdamW: torch::optim::AdamW in one fused kernel
//   fsdp/summon_full_params.h  full parameters outside training (scoped guard)
//   fsdp/deferred_init.h       defer_init: models too big for one rank
//   fsdp/introspection.h       shard placement and memory accounting
//   fsdp/shard_size.h          the shard-padding arithmetic (pure)
//   fsdp/hook_timer.h          wall time inside the hooks (profiling the framework)
//   fsdp/state_dict.h          full and sharded model state dicts, loading
//   fsdp/error_message.h       an error's message without its C++ backtrace
//   fsdp/optim_state_dict.h    optimizer state dicts by parameter name
//   fsdp/checkpoint/training_state.h  save and load a sharded model and optimizer
//   fsdp/checkpoint/save.h     the collective sharded save of tensor pieces
//   fsdp/checkpoint/reader.h   reading a checkpoint on any world size
//   fsdp/checkpoint/strict_check.h    what a checkpoint holds against what a model expects
//   fsdp/checkpoint/convert.h  offline consolidate / export / reshard
//   fsdp/checkpoint/run_dir.h  a run dir's newest verified checkpoint; partial-save cleanup
//   fsdp/checkpoint/async_save.h  AsyncSaver: checkpoints written while training goes on
//   fsdp/file_tree.h           removing and listing directory trees (not std::filesystem's)

#include "fsdp/checkpoint/async_save.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/checkpoint/run_dir.h"
#include "fsdp/checkpoint/save.h"
#include "fsdp/checkpoint/strict_check.h"
#include "fsdp/checkpoint/training_state.h"
#include "fsdp/checkpointed.h"
#include "fsdp/clip_grad.h"
#include "fsdp/comm/compression.h"
#include "fsdp/comm/job_rendezvous.h"
#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/cpu_allocation_counter.h"
#include "fsdp/cpu_heap.h"
#include "fsdp/deferred_init.h"
#include "fsdp/error_message.h"
#include "fsdp/file_tree.h"
#include "fsdp/fully_shard.h"
#include "fsdp/fused_adamw.h"
#include "fsdp/hook_timer.h"
#include "fsdp/introspection.h"
#include "fsdp/optim_state_dict.h"
#include "fsdp/options.h"
#include "fsdp/shard_size.h"
#include "fsdp/sharded.h"
#include "fsdp/state_dict.h"
#include "fsdp/summon_full_params.h"
