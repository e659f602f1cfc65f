#pragma once
// Keeping freed CPU memory in the process for the next step.
//
// [Note: freed CPU memory kept for reuse]
// A sharded step allocates and frees the same large buffers in every unit:
// gathered parameters, full-size gradients, reduction buffers. glibc gives
// such buffers back to the kernel when they are freed (munmap, or trimming
// the heap's free top), so the next step faults every page in again. On a
// small VM, where a page fault is costly, that dominated sharded steps: on
// this project's 2-core VM the 6x256 GPT at two ranks (fsdp-train, full
// shard) took 300-400 ms a step with glibc's defaults and 184-205 ms with
// freed memory kept; NO_SHARD, which frees little, took 170-184 ms either
// way. The resident peak stayed the same (288 and 292 MiB): a training step
// reaches its peak every step anyway. keep_freed_cpu_memory()
// raises glibc's mmap and trim thresholds (mallopt M_MMAP_THRESHOLD and
// M_TRIM_THRESHOLD) so that freed memory stays in the heap for reuse.
// Both must be set: setting only the trim threshold turns off glibc's
// adaptive mmap threshold and sent every buffer above 128 KiB to mmap (1.5 s
// a step for the same model). The cost: memory freed after training ends
// stays with the process until it exits, and buffers larger than
// `largest_buffer_bytes` are still mapped and unmapped each time.
//
// It changes a process-wide setting, so the library never calls it on its
// own: fsdp-train and fsdp-plan's measurements call it at startup, and a
// program that trains on CPU ranks can do the same (docs/performance.md).

#include <cstdint>

namespace fsdp {

// Returns false, changing nothing, where the C library is not glibc or
// refuses the setting; true once both thresholds are set.
bool keep_freed_cpu_memory(int64_t largest_buffer_bytes = int64_t{1} << 30);

}  // namespace fsdp
