#include "fsdp/cpu_heap.h"

#include <algorithm>
#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace fsdp {

// [Note: freed CPU memory kept for reuse] in fsdp/cpu_heap.h.
bool keep_freed_cpu_memory(int64_t largest_buffer_bytes) {
#if defined(__GLIBC__)
  const int threshold = static_cast<int>(std::clamp<int64_t>(largest_buffer_bytes, 1, INT_MAX));
  // The mmap threshold first: setting either turns off glibc's adaptive one.
  return mallopt(M_MMAP_THRESHOLD, threshold) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  (void)largest_buffer_bytes;
  return false;
#endif
}

}  // namespace fsdp
