#pragma once
// One FIFO worker thread per process group. See [Note: one worker per group].

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "fsdp/comm/work.h"

namespace fsdp::comm {

// [Note: one worker per group]
// A ring collective is a sequence of send/recv steps that some thread has to
// drive; Gloo's native collectives (all-reduce, broadcast, barrier) match up
// across ranks only if every rank issues them in the same order. So each
// group owns exactly one worker thread that runs every collective of that
// group, rings and native ones alike, one at a time in issue order. Ranks
// that issue the same sequence therefore execute the same sequence, and a
// caller can issue several collectives and wait for them later.
//
// Failures are sticky: once a job fails (a timeout, a dead peer) the peers
// are out of step and the transport may hold half-finished transfers, so
// every later job of the group fails at once with the first error instead
// of risking a mismatched or hung collective.
//
// A job's closure holds references to the caller's tensors. The worker
// destroys it before it marks the work done, so once wait() returns the
// worker holds none of them: the caller may free or resize their storage
// (FlatParamGrads::free_reduce_input does), and no last reference is dropped
// on the worker behind it. Destroying it after, TSan saw the storage's
// destructor on the worker race the caller's resize.

// The handle a caller waits on; finished by the worker.
class QueuedWork final : public Work {
 public:
  void wait() override;
  bool is_completed() const override;
  void finish(std::exception_ptr error);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class WorkQueue {
 public:
  WorkQueue();
  // Fails the jobs that have not started, finishes the running one, joins.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `job` to run after every job queued before it. `what` names the
  // operation for errors, e.g. "reduce_scatter on group 'world' (rank 1 of
  // 2)"; a failure reads "fsdp: <what> failed: <cause>".
  WorkPtr enqueue(std::string what, std::function<void()> job);

 private:
  struct Job {
    std::string what;
    std::function<void()> run;
    std::shared_ptr<QueuedWork> work;
  };
  void worker_loop();
  std::exception_ptr run_unless_broken(Job& job);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::string first_error_;  // empty until a job fails; only the worker writes it
  std::thread worker_;       // last member: starts after the others exist
};

}  // namespace fsdp::comm
