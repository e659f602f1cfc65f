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
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      if (stopping_) {
        job.work->finish(make_error("fsdp: " + job.what +
                                    " failed: the group was destroyed before it ran"));
        continue;
      }
    }
    if (!first_error_.empty()) {
      // See [Note: one worker per group]: the group is broken.
      job.work->finish(make_error("fsdp: " + job.what +
                                  " failed: the group is broken by an earlier failure: " +
                                  first_error_));
      continue;
    }
    std::string cause;
    try {
      job.run();
    } catch (const std::exception& e) {
      cause = error_message(e);
    } catch (...) {
      cause = "unknown exception";
    }
    if (cause.empty()) {
      job.work->finish(nullptr);
    } else {
      const std::string message = "fsdp: " + job.what + " failed: " + cause;
      first_error_ = message;
      job.work->finish(make_error(message));
    }
    job.run = nullptr;  // drop tensor references before the next job
  }
}

}  // namespace fsdp::comm
