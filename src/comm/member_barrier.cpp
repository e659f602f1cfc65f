#include "comm/member_barrier.h"

#include <c10/util/Exception.h>

#include <vector>

#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

const std::string kArrivals = "joined/count";
const std::string kAllArrived = "joined/all";

std::string arrival_key(int rank) { return "joined/" + std::to_string(rank); }

// "1, 3" for the members whose arrival key is not in the store.
std::string absent_members(c10d::Store& store, int size) {
  std::string absent;
  for (int r = 0; r < size; ++r) {
    if (store.check({arrival_key(r)})) continue;
    absent += (absent.empty() ? "" : ", ") + std::to_string(r);
  }
  return absent.empty() ? "none (all arrived just now)" : absent;
}

}  // namespace

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
