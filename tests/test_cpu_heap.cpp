// fsdp::keep_freed_cpu_memory: a freed buffer comes back without its pages
// being faulted in again ([Note: freed CPU memory kept for reuse]). Each
// case runs in a process of its own (tests/labels.cmake), so glibc starts at
// its defaults.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>

#include "fsdp/cpu_heap.h"

namespace {

long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Allocates `bytes`, writes every page, frees it: `times` times after one
// warm-up round, and returns the page faults those rounds took.
long faults_reallocating(size_t bytes, int times) {
  const auto round = [bytes] {
    volatile char* buffer = static_cast<char*>(std::malloc(bytes));
    ASSERT_NE(buffer, nullptr);
    for (size_t i = 0; i < bytes; i += 4096) buffer[i] = 1;
    std::free(const_cast<char*>(buffer));
  };
  round();
  const long before = minor_page_faults();
  for (int i = 0; i < times; ++i) round();
  return minor_page_faults() - before;
}

// Above glibc's largest adaptive mmap threshold (32 MiB on 64-bit), so with
// its defaults every allocation is mapped, and faulted in, anew.
constexpr size_t kBuffer = size_t{64} << 20;
constexpr long kHugePages = kBuffer / (size_t{2} << 20);  // the fewest faults a round can take

TEST(CpuHeap, FreedBuffersComeBackWithoutFaultingTheirPagesIn) {
  const long with_defaults = faults_reallocating(kBuffer, 4);
  ASSERT_GE(with_defaults, 4 * kHugePages) << "glibc's defaults should map each round anew";
  ASSERT_TRUE(fsdp::keep_freed_cpu_memory());
  faults_reallocating(kBuffer, 1);  // the heap grows to hold it once
  const long kept = faults_reallocating(kBuffer, 4);
  EXPECT_LT(kept * 10, with_defaults) << "with defaults " << with_defaults << " faults, kept " << kept;
}

TEST(CpuHeap, BuffersAboveTheGivenSizeAreStillMapped) {
  ASSERT_TRUE(fsdp::keep_freed_cpu_memory(int64_t{16} << 20));
  EXPECT_GE(faults_reallocating(kBuffer, 4), 4 * kHugePages);
}

}  // namespace
