#pragma once
// Where a rank trains: --device cpu (every rank on the host's cores, Gloo)
// or --device cuda (each rank on the GPU its LOCAL_RANK names, NCCL).
//
// [Note: one GPU per rank, chosen by LOCAL_RANK]
// Launchers (fsdp-run, torchrun, mpirun, srun) number the ranks of a node
// 0..LOCAL_WORLD_SIZE-1, so LOCAL_RANK picks a distinct GPU per rank with no
// further flag, as torchrun users expect. The GPU is also made the current
// device before the process group exists: NCCL's communicators, streams and
// any tensor built without an explicit index land on it. Two ranks on one
// GPU are refused: NCCL does not support it.

#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "fsdp/comm/process_group.h"
#include "train_options.h"

namespace fsdp_train {

// Appends what is wrong with --device on its own: a value other than cpu
// or cuda, or a combination this trainer does not run on a GPU.
void validate_device(const TrainOptions& options, std::vector<std::string>& errors);

// What is wrong with --device on this rank (the build has no CUDA, the node
// has fewer GPUs than ranks with NCCL); "" when it can be used. Every rank of
// a node reaches the same verdict: the GPU count and LOCAL_WORLD_SIZE are
// shared.
std::string check_device(const TrainOptions& options, int local_world_size);

// The device this rank trains on; for CUDA it also becomes the current one.
// With --backend gloo, ranks may outnumber the GPUs and share them
// round-robin (LOCAL_RANK modulo the GPU count).
c10::Device select_training_device(const TrainOptions& options, int local_rank);

// The world group's options for --device and --backend: NCCL for CUDA
// unless --backend gloo asks for Gloo with host staging (GroupOptions::
// host_staging); Gloo on the CPU.
fsdp::CommBackend training_backend(const TrainOptions& options);
bool stages_through_host(const TrainOptions& options);

// Intra-op threads of a rank: ranks on one machine share its cores, each
// getting 1/LOCAL_WORLD_SIZE of them, unless OMP_NUM_THREADS says otherwise.
int threads_per_rank(int local_world_size);

// The caching allocator's peaks on a CUDA device since the last reset
// (torch.cuda.max_memory_allocated / max_memory_reserved); zero on the CPU.
struct DevicePeakMemory {
  int64_t allocated = 0;  // bytes in live tensors at most
  int64_t reserved = 0;   // bytes the allocator held from the driver at most
};
void reset_device_peak_memory(const c10::Device& device);
DevicePeakMemory device_peak_memory(const c10::Device& device);

}  // namespace fsdp_train
