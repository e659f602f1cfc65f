#pragma once
// comm::DeadlineStore: a c10d::Store whose every call returns or throws
// within a bound, and call_within, the helper thread it runs calls on.
//
// [Note: a deadline on every store call]
// A TCPStore client waits in recv() for as long as its server does not
// answer, and in LibTorch 1.13 most calls (set, add, check, get before its
// first wait) set no socket timeout at all. With rank 0, which serves the
// store, stopped (SIGSTOP) between the store's connection and the world
// group's creation, rank 1 would stay blocked in check() long after its
// timeout; a deadline around the rendezvous alone does not cover the calls
// after it: the readiness exchange, Gloo's full-mesh rendezvous, the member
// barrier, NCCL's unique id. So the job's store is wrapped once, where
// it is connected, and every call through it, ours or a backend's, runs on a
// helper thread that the caller waits for at most the store's timeout (a
// wait's own timeout, if longer) plus a second, so that TCPStore's own, more
// precise errors come first. Past that the caller throws StoreNotAnswering,
// naming the call, its keys and who serves the store; the helper thread
// stays blocked and is abandoned, which is safe since the process is about
// to fail. Failures of the inner store are rethrown naming the same things,
// as not answering if the server then does not answer a quick question.
// Store calls happen when groups are created, not in collectives, so a
// thread per call costs nothing that matters.

#include <c10/util/Exception.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "compat.h"

namespace fsdp::comm {

// Runs `call` (which must own what it uses: it may outlive this function) on
// a helper thread and returns its result, or nothing if it has not finished
// within `bound`; the thread is then abandoned. An exception it throws is
// rethrown here.
template <typename Call>
std::optional<std::invoke_result_t<Call>> call_within(std::chrono::milliseconds bound, Call call) {
  using Result = std::invoke_result_t<Call>;
  auto task = std::make_shared<std::packaged_task<Result()>>(std::move(call));
  std::future<Result> result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (result.wait_for(bound) != std::future_status::ready) return std::nullopt;
  return result.get();
}

// A store call that got no answer within its bound: the server is stopped,
// hung or unreachable.
class StoreNotAnswering : public c10::Error {
 public:
  using c10::Error::Error;
};

class DeadlineStore final : public compat::CloneableStore<DeadlineStore> {
 public:
  // `server` names who serves `inner` in errors, e.g. "the rendezvous store
  // at 10.0.0.1:29500 (rank 0 serves it)"; `hint` says what to check, e.g.
  // "is rank 0 stopped or hung? ...". The timeout is `inner`'s.
  DeadlineStore(c10::intrusive_ptr<c10d::Store> inner, std::string server, std::string hint);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& current,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;
  // Where c10d::Store has clone(): the same deadlines over the inner store's
  // clone. A template, so that it is compiled only where CloneableStore
  // calls it. See [Note: a store that clones itself] in compat.h.
  template <class Inner = c10d::Store>
  c10::intrusive_ptr<c10d::Store> clone_store() {
    return c10::make_intrusive<DeadlineStore>(static_cast<Inner&>(*inner_).clone(), server_, hint_);
  }

 private:
  // Runs `call(*inner_)` within `bound` plus a second, as the Note says.
  template <typename Call>
  auto bounded(const char* what, const std::vector<std::string>& keys,
               std::chrono::milliseconds bound, Call call);
  // Whether the server answers a quick question within a second. See
  // [Note: a timed-out wait, a stopped server or a missing key].
  bool answers_now() const;
  [[noreturn]] void throw_not_answering(const char* what, const std::vector<std::string>& keys,
                                        std::chrono::milliseconds bound) const;
  [[noreturn]] void throw_failed(const char* what, const std::vector<std::string>& keys,
                                 const std::exception& cause) const;

  const c10::intrusive_ptr<c10d::Store> inner_;
  const std::string server_;
  const std::string hint_;
};

}  // namespace fsdp::comm
