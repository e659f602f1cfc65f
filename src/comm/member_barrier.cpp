#include "comm/member_barrier.h"

#include <c10/util/Exception.h>

#include <vector>

#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

const std::string kArrivals = "joined/count";
const std::string kAllArrived = "joined/all";

std::string arrival_key(int rank) { return "joined/" + std::to_string(rank); }
std::string joining_key(int rank) { return "joining/" + std::to_string(rank); }

// "1, 3" for the members whose `key` is not in the store; "" if none.
std::string members_without(c10d::Store& store, int size, std::string (*key)(int)) {
  std::string absent;
  for (int r = 0; r < size; ++r) {
    if (store.check({key(r)})) continue;
    absent += (absent.empty() ? "" : ", ") + std::to_string(r);
  }
  return absent;
}

std::string absent_members(c10d::Store& store, int size) {
  const std::string absent = members_without(store, size, &arrival_key);
  return absent.empty() ? "none (all arrived just now)" : absent;
}

}  // namespace

void announce_joining(c10d::Store& store, int rank) {
  store.set(joining_key(rank), std::vector<uint8_t>{1});
}

std::string members_not_joining(c10d::Store& store, int size) {
  const std::string absent = members_without(store, size, &joining_key);
  return absent.empty() ? "none" : absent;
}

void wait_for_every_member(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           const std::string& name, std::chrono::milliseconds timeout) {
  if (size <= 1) return;
  store->set(arrival_key(rank), std::vector<uint8_t>{1});
  // The last to arrive opens the barrier for everyone.
  if (store->add(kArrivals, 1) == size) store->set(kAllArrived, std::vector<uint8_t>{1});
  try {
    store->wait({kAllArrived}, timeout);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "fsdp: group '", name, "' (rank ", rank, " of ", size,
                "): members that never finished joining after ", timeout.count(),
                " ms: ", absent_members(*store, size),
                ". Check that those ranks are alive and create the same groups in the same "
                "order; raise the timeout with GroupOptions::timeout if they are only slow. (",
                error_message(e), ")");
  }
}

}  // namespace fsdp::comm
