#include "fsdp/cpu_allocation_counter.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "compat.h"

namespace fsdp {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

void count_allocation(int64_t bytes) {
  const int64_t now = g_current.fetch_add(bytes) + bytes;
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

// The underlying allocator's pointers, by address, with their sizes. The
// counted pointer's context is its own address, as raw_allocate() requires.
std::mutex g_blocks_mutex;
std::unordered_map<void*, std::pair<c10::DataPtr, int64_t>>& blocks() {
  static auto* map = new std::unordered_map<void*, std::pair<c10::DataPtr, int64_t>>();  // never destroyed
  return *map;
}

// Frees what the underlying allocator gave out uncounted: zero-byte blocks
// and, through raw_deleter(), memory raw-allocated before install().
c10::DeleterFnPtr g_underlying_raw_deleter = nullptr;

void free_counted(void* data) {
  std::pair<c10::DataPtr, int64_t> block;
  {
    std::lock_guard<std::mutex> lock(g_blocks_mutex);
    auto it = blocks().find(data);
    if (it == blocks().end()) {
      if (data != nullptr && g_underlying_raw_deleter) g_underlying_raw_deleter(data);
      return;
    }
    block = std::move(it->second);
    blocks().erase(it);
  }
  g_current.fetch_sub(block.second);
  // `block.first` frees the memory through the underlying allocator here.
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* underlying) : underlying_(underlying) {}

#if FSDP_ALLOCATOR_2_3
  c10::DataPtr allocate(size_t bytes) override {
#else
  c10::DataPtr allocate(size_t bytes) const override {
#endif
    c10::DataPtr inner = underlying_->allocate(bytes);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero bytes
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(g_blocks_mutex);
      blocks().emplace(data, std::make_pair(std::move(inner), static_cast<int64_t>(bytes)));
    }
    count_allocation(static_cast<int64_t>(bytes));
    return {data, data, &free_counted, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_counted; }

#if FSDP_ALLOCATOR_2_3
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#endif

 private:
  c10::Allocator* underlying_;
};

}  // namespace

CpuAllocationCounter& CpuAllocationCounter::install() {
  static CpuAllocationCounter* counter = [] {
    // Never destroyed: tensors may outlive any static.
    c10::Allocator* underlying = c10::GetCPUAllocator();
    g_underlying_raw_deleter = underlying->raw_deleter();
    auto* allocator = new CountingAllocator(underlying);
    // A high priority, so a later registration of a default allocator does not
    // silently replace the counter.
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    return new CpuAllocationCounter();
  }();
  return *counter;
}

int64_t CpuAllocationCounter::current_bytes() const { return g_current.load(); }

int64_t CpuAllocationCounter::peak_bytes() const { return g_peak.load(); }

void CpuAllocationCounter::reset_peak() { g_peak.store(g_current.load()); }

}  // namespace fsdp
