#include "fsdp/hook_timer.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>

#include "hook_ranges.h"

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

// The totals, shared by every thread. Never destroyed: a range that began
// under a timer ends under LibTorch's copy of its callbacks, possibly after
// the timer (or static destruction) is gone.
class HookTotals {
 public:
  void add(const char* range, Clock::duration elapsed) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (HookTime& t : totals_) {
      if (t.range == range) {
        ++t.calls;
        t.seconds += std::chrono::duration<double>(elapsed).count();
        return;
      }
    }
    totals_.push_back({range, 1, std::chrono::duration<double>(elapsed).count()});
  }
  std::vector<HookTime> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<HookTime> out;
    out.swap(totals_);
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<HookTime> totals_;
};

HookTotals& hook_totals() {
  static auto* totals = new HookTotals();
  return *totals;
}

std::atomic<bool> timer_alive{false};
thread_local int open_hook_ranges = 0;  // FSDP:: ranges open on this thread

struct HookRangeStart : at::ObserverContext {
  explicit HookRangeStart(bool outermost) : outermost(outermost), start(Clock::now()) {}
  bool outermost;
  Clock::time_point start;
};

bool is_hook_range(const at::RecordFunction& fn) {
  const char* name = fn.name();
  return name != nullptr &&
         std::strncmp(name, detail::kHookRangePrefix, std::strlen(detail::kHookRangePrefix)) == 0;
}

std::unique_ptr<at::ObserverContext> on_range_start(const at::RecordFunction& fn) {
  if (!is_hook_range(fn)) return nullptr;
  // Only the outermost range counts: a hook that runs another (the root's
  // callback finishing a unit's backward) is timed once.
  return std::make_unique<HookRangeStart>(open_hook_ranges++ == 0);
}

void on_range_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (context == nullptr) return;
  --open_hook_ranges;
  auto* start = static_cast<HookRangeStart*>(context);
  if (start->outermost) hook_totals().add(fn.name(), Clock::now() - start->start);
}

}  // namespace

HookTimer::HookTimer() {
  bool expected = false;
  TORCH_CHECK(timer_alive.compare_exchange_strong(expected, true),
              "fsdp::HookTimer: another HookTimer is already counting; take() from that one, or "
              "let it go out of scope before making a new one");
  hook_totals().take();  // what ranges that outlived an earlier timer left
  callback_handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_range_start, &on_range_end)
          .needsInputs(false)
          .scopes({at::RecordScope::USER_SCOPE}));
}

HookTimer::~HookTimer() {
  at::removeCallback(callback_handle_);
  timer_alive.store(false);
}

std::vector<HookTime> HookTimer::take() { return hook_totals().take(); }

std::string hook_name(const HookTime& time) {
  const size_t prefix = std::strlen(detail::kHookRangePrefix);
  const bool prefixed = time.range.compare(0, prefix, detail::kHookRangePrefix) == 0;
  return prefixed ? time.range.substr(prefix) : time.range;
}

double total_seconds(const std::vector<HookTime>& times) {
  double sum = 0;
  for (const HookTime& t : times) sum += t.seconds;
  return sum;
}

}  // namespace fsdp
