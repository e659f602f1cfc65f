#include "comm/deadline_store.h"

#include <c10/util/StringUtil.h>

#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

// TCPStore's own timeouts are more precise than ours; they should win.
constexpr std::chrono::milliseconds kSlack{1000};

// "check('a', 'b')"
std::string describe_call(const char* what, const std::vector<std::string>& keys) {
  std::string text = std::string(what) + "(";
  for (size_t i = 0; i < keys.size(); ++i) text += (i ? ", '" : "'") + keys[i] + "'";
  return text + ")";
}

// Zero means "no timeout" to c10d; we never wait without one.
std::chrono::milliseconds bound_or(std::chrono::milliseconds wanted,
                                   std::chrono::milliseconds fallback) {
  return wanted.count() > 0 ? wanted : fallback;
}

}  // namespace

DeadlineStore::DeadlineStore(c10::intrusive_ptr<c10d::Store> inner, std::string server,
                             std::string hint)
    : CloneableStore(inner->getTimeout()),
      inner_(std::move(inner)),
      server_(std::move(server)),
      hint_(std::move(hint)) {}

// See [Note: a deadline on every store call]
template <typename Call>
auto DeadlineStore::bounded(const char* what, const std::vector<std::string>& keys,
                            std::chrono::milliseconds bound, Call call) {
  try {
    auto result = call_within(bound + kSlack, [inner = inner_, call] { return call(*inner); });
    if (!result) throw_not_answering(what, keys, bound);
    return std::move(*result);
  } catch (const StoreNotAnswering&) {
    throw;
  } catch (const std::exception& e) {
    if (!answers_now()) throw_not_answering(what, keys, bound);
    throw_failed(what, keys, e);
  }
}

// [Note: a timed-out wait, a stopped server or a missing key]
// LibTorch 1.13's TCPStore fails a get or wait with "Socket Timeout" both
// when its server does not answer and when the key is never set (a peer
// that never came): the socket's receive timeout is the wait's. The two
// call for different advice, so after a failure we ask the server a
// question it answers at once; no answer within a second means the server,
// not a peer, is what the call waited for.
bool DeadlineStore::answers_now() const {
  try {
    return call_within(kSlack, [inner = inner_] { return inner->check({"fsdp/ping"}); })
        .has_value();
  } catch (const std::exception&) {
    return true;  // it answered, with an error: the failure stands as it is
  }
}

void DeadlineStore::throw_not_answering(const char* what, const std::vector<std::string>& keys,
                                        std::chrono::milliseconds bound) const {
  throw StoreNotAnswering({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                          c10::str(server_, " did not answer ", describe_call(what, keys),
                                   " within ", bound.count(), " ms: ", hint_));
}

void DeadlineStore::throw_failed(const char* what, const std::vector<std::string>& keys,
                                 const std::exception& cause) const {
  // No hint: a TCPStore wait that times out on a live server (a peer never
  // set the key) fails too, and rank 0 is then not the one to blame.
  TORCH_CHECK(false, server_, " failed ", describe_call(what, keys), ": ", error_message(cause));
}

// Every call copies its arguments into the helper thread's closure: the
// caller's may be gone when an abandoned call ends.
void DeadlineStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  bounded("set", {key}, timeout_, [key, value](c10d::Store& s) {
    s.set(key, value);
    return true;
  });
}

std::vector<uint8_t> DeadlineStore::compareSet(const std::string& key,
                                               const std::vector<uint8_t>& current,
                                               const std::vector<uint8_t>& desired) {
  return bounded("compareSet", {key}, timeout_, [key, current, desired](c10d::Store& s) {
    return s.compareSet(key, current, desired);
  });
}

std::vector<uint8_t> DeadlineStore::get(const std::string& key) {
  return bounded("get", {key}, timeout_, [key](c10d::Store& s) { return s.get(key); });
}

int64_t DeadlineStore::add(const std::string& key, int64_t value) {
  return bounded("add", {key}, timeout_,
                 [key, value](c10d::Store& s) { return s.add(key, value); });
}

bool DeadlineStore::deleteKey(const std::string& key) {
  return bounded("deleteKey", {key}, timeout_, [key](c10d::Store& s) { return s.deleteKey(key); });
}

bool DeadlineStore::check(const std::vector<std::string>& keys) {
  return bounded("check", keys, timeout_, [keys](c10d::Store& s) { return s.check(keys); });
}

int64_t DeadlineStore::getNumKeys() {
  return bounded("getNumKeys", {}, timeout_, [](c10d::Store& s) { return s.getNumKeys(); });
}

void DeadlineStore::wait(const std::vector<std::string>& keys) {
  bounded("wait", keys, timeout_, [keys](c10d::Store& s) {
    s.wait(keys);
    return true;
  });
}

void DeadlineStore::wait(const std::vector<std::string>& keys,
                         const std::chrono::milliseconds& timeout) {
  const std::chrono::milliseconds own = timeout;
  bounded("wait", keys, bound_or(own, timeout_), [keys, own](c10d::Store& s) {
    s.wait(keys, own);
    return true;
  });
}

void DeadlineStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  inner_->setTimeout(timeout);
}

}  // namespace fsdp::comm
