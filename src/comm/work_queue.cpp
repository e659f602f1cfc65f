#include "comm/work_queue.h"

#include <c10/util/Exception.h>

#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

std::exception_ptr make_error(const std::string& message) {
  return std::make_exception_ptr(
      c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
}

}  // namespace

void QueuedWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool QueuedWork::is_completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void QueuedWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

WorkQueue::WorkQueue() : worker_([this] { worker_loop(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

WorkPtr WorkQueue::enqueue(std::string what, std::function<void()> job) {
  auto work = std::make_shared<QueuedWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    TORCH_INTERNAL_ASSERT(!stopping_, "collective issued on a group being destroyed");
    jobs_.push_back(Job{std::move(what), std::move(job), work});
  }
  cv_.notify_one();
  return work;
}

void WorkQueue::worker_loop() {
  for (;;) {
    Job job;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      stopping = stopping_;
    }
    std::exception_ptr error =
        stopping
            ? make_error("fsdp: " + job.what + " failed: the group was destroyed before it ran")
            : run_unless_broken(job);
    job.run = nullptr;  // before finish(): see [Note: one worker per group]
    job.work->finish(std::move(error));
  }
}

// Runs `job`, or fails it at once if an earlier job broke the group; the
// error to finish it with, if any.
std::exception_ptr WorkQueue::run_unless_broken(Job& job) {
  if (!first_error_.empty()) {
    return make_error("fsdp: " + job.what +
                      " failed: the group is broken by an earlier failure: " + first_error_);
  }
  std::string cause;
  try {
    job.run();
  } catch (const std::exception& e) {
    cause = error_message(e);
  } catch (...) {
    cause = "unknown exception";
  }
  if (cause.empty()) return nullptr;
  first_error_ = "fsdp: " + job.what + " failed: " + cause;
  return make_error(first_error_);
}

}  // namespace fsdp::comm
