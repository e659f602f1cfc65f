// See [Note: saving while training] in include/fsdp/checkpoint/async_save.h.

#include "fsdp/checkpoint/async_save.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>
#include <cstdio>
#include <numeric>
#include <utility>

#include "checkpoint/host_copies.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/error_message.h"

namespace fsdp::ckpt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A group over every rank of `world`, for the background saves alone.
std::shared_ptr<ProcessGroup> saver_group(ProcessGroup& world) {
  std::vector<int> everyone(static_cast<size_t>(world.size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  return world.new_subgroup(everyone, world.options().name + "/async-save");
}

// The calling thread's CUDA device, where CUDA is present. The background
// thread must use it too: a new thread starts on device 0, and an NCCL
// group's control tensors go to the current device (see [Note: a group's
// device] in fsdp/comm/process_group.h).
c10::optional<c10::Device> current_cuda_device() {
  if (!at::hasCUDA()) return {};
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
}

}  // namespace

AsyncSaver::AsyncSaver(ProcessGroup& world)
    : group_(saver_group(world)), host_copies_(std::make_unique<detail::HostCopies>()) {}

AsyncSaver::~AsyncSaver() {
  if (pending_.valid()) collect();
  if (!failure_) return;
  try {
    std::rethrow_exception(failure_);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "fsdp: an asynchronous checkpoint save failed and no wait() reported it: %s\n",
                 error_message(e).c_str());
  }
}

void AsyncSaver::reserve(int64_t bytes) {
  // The copies of a save in flight hold the mapping: a reservation then
  // would map a second one beside it.
  TORCH_CHECK(!pending_.valid(), "fsdp: AsyncSaver::reserve(", bytes,
              ") was called while a save is in flight; call it before the first save() "
              "or after wait()");
  TORCH_CHECK(bytes >= 0, "fsdp: AsyncSaver::reserve(", bytes,
              "): the bytes must be 0 or more (host_copy_bytes of the pieces to save)");
  host_copies_->reserve(bytes);
}

std::optional<FinishedSave> AsyncSaver::save(const std::string& dir,
                                             std::vector<TensorPiece> pieces,
                                             const SaveOptions& options) {
  finish_pending();  // at most one in flight; its failure throws here, on every rank
  std::optional<FinishedSave> previous = std::exchange(finished_, std::nullopt);
  const auto copy_start = Clock::now();
  host_copies_->copy(pieces);  // into the last save's memory: finish_pending() ended it
  FinishedSave finished{dir, options.step, seconds_since(copy_start), 0};
  SaveOptions write_options = options;
  write_options.bypass_page_cache = true;  // see SaveOptions::bypass_page_cache
  auto write = [group = group_, pieces = std::move(pieces), options = std::move(write_options),
                finished = std::move(finished), device = current_cuda_device()]() mutable {
    const c10::OptionalDeviceGuard on_callers_device(device);
    Outcome outcome;
    const auto write_start = Clock::now();
    try {
      fsdp::ckpt::save(*group, finished.dir, pieces, options);
      finished.write_seconds = seconds_since(write_start);
      outcome.finished = std::move(finished);
    } catch (...) {
      outcome.failure = std::current_exception();
    }
    return outcome;
  };
  pending_ = std::async(std::launch::async, std::move(write));
  return previous;
}

std::optional<FinishedSave> AsyncSaver::poll() {
  if (pending_.valid() && pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    collect();
  }
  return std::exchange(finished_, std::nullopt);
}

std::optional<FinishedSave> AsyncSaver::wait() {
  finish_pending();
  return std::exchange(finished_, std::nullopt);
}

void AsyncSaver::finish_pending() {
  if (pending_.valid()) collect();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void AsyncSaver::collect() {
  Outcome outcome = pending_.get();  // waits; the task itself never throws
  if (outcome.failure) failure_ = outcome.failure;
  if (!outcome.finished) return;
  // save() took the one before: each save is returned once (see the header).
  TORCH_INTERNAL_ASSERT(!finished_, "fsdp: an unreturned save would be overwritten");
  finished_ = std::move(outcome.finished);
}

}  // namespace fsdp::ckpt
