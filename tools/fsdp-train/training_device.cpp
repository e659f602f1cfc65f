#include "training_device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#if defined(FSDP_WITH_NCCL)  // a CUDA build of LibTorch: its CUDA headers are there
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fsdp_train {

void validate_device(const TrainOptions& o, std::vector<std::string>& errors) {
  if (o.device != "cpu" && o.device != "cuda") {
    errors.push_back(fmt::format("--device '{}' is not one of: cpu, cuda", o.device));
  }
  if (!o.backend.empty() && o.backend != "gloo" && o.backend != "nccl") {
    errors.push_back(fmt::format("--backend '{}' is not one of: gloo, nccl", o.backend));
  }
  if (o.device != "cuda" && o.backend == "nccl") {
    errors.push_back(
        "--backend nccl moves CUDA tensors only; pass --device cuda with it, or "
        "leave out --backend (the CPU uses gloo)");
  }
  if (o.device == "cuda" && o.deferred_init) {
    // Deferred init materializes each module on the CPU; on a GPU the whole
    // model is built on the host and moved, which any GPU that trains it
    // affords (a 1 B model: 4 GiB of host memory, once).
    errors.push_back("--deferred-init builds on the CPU and cannot be combined with --device "
                     "cuda yet; leave out --deferred-init (the model is built on the host once, "
                     "then moved to the GPU)");
  }
}

std::string check_device(const TrainOptions& o, int local_world_size) {
  if (o.device != "cuda") return "";
#if !defined(FSDP_WITH_NCCL)
  (void)local_world_size;
  return "--device cuda: this fsdp-train was built against a LibTorch without CUDA; build it "
         "against a CUDA LibTorch (docs/gpu.md), or pass --device cpu";
#else
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (!torch::cuda::is_available() || gpus == 0) {
    return "--device cuda: no CUDA GPU is visible to this process (check nvidia-smi and "
           "CUDA_VISIBLE_DEVICES), or pass --device cpu";
  }
  if (local_world_size > gpus && !stages_through_host(o)) {
    return fmt::format(
        "--device cuda: this node runs {} ranks but has {} GPU{}, and each rank needs a GPU of "
        "its own (NCCL cannot put two ranks on one); run at most {} rank{} per node "
        "(fsdp-run --nproc-per-node {}), or pass --backend gloo to share the GPU{} through "
        "host memory (slow: for debugging)",
        local_world_size, gpus, gpus == 1 ? "" : "s", gpus, gpus == 1 ? "" : "s", gpus,
        gpus == 1 ? "" : "s");
  }
  return "";
#endif
}

c10::Device select_training_device(const TrainOptions& o, int local_rank) {
  if (o.device != "cuda") return c10::Device(c10::kCPU);
  // check_device let more ranks than GPUs through only for --backend gloo.
  const int gpus = std::max<int>(1, static_cast<int>(torch::cuda::device_count()));
  const c10::Device gpu(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
  // See [Note: one GPU per rank, chosen by LOCAL_RANK] in training_device.h.
  c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(gpu);
  return gpu;
}

fsdp::CommBackend training_backend(const TrainOptions& o) {
  if (o.backend.empty()) {
    return o.device == "cuda" ? fsdp::CommBackend::kNccl : fsdp::CommBackend::kGloo;
  }
  return o.backend == "nccl" ? fsdp::CommBackend::kNccl : fsdp::CommBackend::kGloo;
}

bool stages_through_host(const TrainOptions& o) {
  return o.device == "cuda" && training_backend(o) == fsdp::CommBackend::kGloo;
}

int threads_per_rank(int local_world_size) {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    return std::atoi(env);
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, local_world_size));
}

void reset_device_peak_memory(const c10::Device& device) {
#if defined(FSDP_WITH_NCCL)
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

DevicePeakMemory device_peak_memory(const c10::Device& device) {
  DevicePeakMemory peak;
#if defined(FSDP_WITH_NCCL)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    peak.allocated = stats.allocated_bytes[0].peak;  // [0]: the aggregate over both pools
    peak.reserved = stats.reserved_bytes[0].peak;
  }
#else
  (void)device;
#endif
  return peak;
}

}  // namespace fsdp_train
