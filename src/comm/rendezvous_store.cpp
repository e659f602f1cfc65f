#include "comm/rendezvous_store.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/deadline_store.h"
#include "compat.h"
#include "fsdp/error_message.h"

namespace fsdp::comm {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kRendezvousArrivals = "fsdp/rendezvous/count";

std::string rendezvous_arrival_key(int rank) { return "fsdp/rendezvous/" + std::to_string(rank); }

std::string where(const LaunchEnv& env) {
  return env.master_addr + ":" + std::to_string(env.master_port);
}

// "2, 3 (node_rank 1)": the ranks whose arrival key is missing, with their
// nodes when every node runs local_world_size ranks.
std::string missing_ranks(c10d::Store& store, const LaunchEnv& env) {
  std::string ranks;
  std::vector<int> nodes;
  for (int r = 0; r < env.world_size; ++r) {
    if (store.check({rendezvous_arrival_key(r)})) continue;
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    const int node = r / std::max(1, env.local_world_size);
    if (nodes.empty() || nodes.back() != node) nodes.push_back(node);
  }
  std::string node_list;
  for (int n : nodes) node_list += (node_list.empty() ? "" : ", ") + std::to_string(n);
  return ranks + " (node_rank " + node_list + ")";
}

c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& env,
                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = false;  // we wait ourselves, with progress and a deadline
  options.timeout = timeout;
  // No libuv in Debian's 2.6. See [Note: the TCPStore server libfsdp asks for].
  compat::use_classic_tcpstore_server(options);
  try {
    const compat::QuietLibTorchLog
        quiet;  // See [Note: no raw LibTorch log line while a store connects]
    // See [Note: a deadline on every store call]
    return c10::make_intrusive<DeadlineStore>(
        c10::make_intrusive<c10d::TCPStore>(env.master_addr, options),
        "the rendezvous store at " + where(env) + " (rank 0 serves it)",
        "is rank 0 stopped or hung? Check that its process is running, or raise the timeout "
        "(--timeout, FSDP_COMM_TIMEOUT)");
  } catch (const std::exception& e) {
    // A server fails at once (its port is taken, its address is not local):
    // no timeout was waited out.
    TORCH_CHECK(env.rank != 0, "fsdp: rank 0 of ", env.world_size, " (", env.source,
                " environment) could not serve the rendezvous store at MASTER_ADDR:MASTER_PORT "
                "= ",
                where(env), ": ", error_message(e), ". If another process holds port ",
                env.master_port,
                ", choose a free MASTER_PORT (fsdp-run --master-port) or end "
                "that process; MASTER_ADDR must be an address of rank 0's host");
    TORCH_CHECK(false, "fsdp: rank ", env.rank, " of ", env.world_size, " (", env.source,
                " environment) could not reach the rendezvous store at MASTER_ADDR:MASTER_PORT "
                "= ",
                where(env), " within ", timeout.count(), " ms: ", error_message(e));
  }
}

// How many ranks have arrived. A store whose server went away (rank 0 gave
// up or died) is named as such, not by its socket error alone.
int64_t arrivals(c10d::Store& store, const LaunchEnv& env) {
  try {
    return store.add(kRendezvousArrivals, 0);
  } catch (const std::exception& e) {
    throw_store_stopped_answering(env, "waited for the others", e);
  }
}

// Rank 0 says who is missing, now and then, until everyone is there.
void wait_for_all_ranks(c10d::Store& store, const LaunchEnv& env,
                        std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  const auto progress_every =
      std::min<Clock::duration>(std::chrono::seconds(30), std::max<Clock::duration>(
                                                              std::chrono::seconds(1), timeout / 4));
  auto next_progress = start + progress_every;
  while (arrivals(store, env) < env.world_size) {
    const auto now = Clock::now();
    if (now - start > timeout) {
      TORCH_CHECK(false, "fsdp: rank ", env.rank, ": ranks ", missing_ranks(store, env),
                  " never reached the rendezvous at ", where(env), " within ", timeout.count(),
                  " ms. Start every node's launcher (same MASTER_ADDR/MASTER_PORT and "
                  "--nnodes), or raise the timeout (--timeout, FSDP_COMM_TIMEOUT)");
    }
    if (env.rank == 0 && now >= next_progress) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start);
      std::fprintf(stderr, "fsdp: waiting for ranks %s at %s (%lld s of %lld s)\n",
                   missing_ranks(store, env).c_str(), where(env).c_str(),
                   static_cast<long long>(waited.count()),
                   static_cast<long long>(timeout.count() / 1000));
      next_progress += progress_every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

c10::intrusive_ptr<c10d::Store> rendezvous(const LaunchEnv& env,
                                           std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Store> store = connect_store(env, timeout);
  try {
    store->set(rendezvous_arrival_key(env.rank), std::vector<uint8_t>{1});
    store->add(kRendezvousArrivals, 1);
  } catch (const std::exception& e) {
    throw_store_stopped_answering(env, "announced its arrival", e);
  }
  wait_for_all_ranks(*store, env, timeout);
  return store;
}

}  // namespace

void throw_store_stopped_answering(const LaunchEnv& env, const char* doing,
                                   const std::exception& cause) {
  // A store that answers no more says what to check itself; one that failed
  // (a reset connection) most likely lost its server.
  const bool not_answering = dynamic_cast<const StoreNotAnswering*>(&cause) != nullptr;
  TORCH_CHECK(false, "fsdp: rank ", env.rank, " of ", env.world_size,
              " could not finish the rendezvous: while it ", doing, ", ", error_message(cause),
              not_answering ? ""
                            : ". Rank 0 serves that store: check its output (it may have "
                              "given up waiting, or died)");
}

// See [Note: a deadline on every rendezvous wait] in rendezvous_store.h.
c10::intrusive_ptr<c10d::Store> join_rendezvous(const LaunchEnv& env,
                                                std::chrono::milliseconds timeout) {
  using Result = c10::intrusive_ptr<c10d::Store>;
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> result = promise->get_future();
  std::thread([promise, env, timeout] {
    try {
      promise->set_value(rendezvous(env, timeout));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();
  // Later than the store's own deadline, whose error names the call.
  if (result.wait_for(timeout + std::chrono::seconds(2)) == std::future_status::ready) {
    return result.get();
  }
  TORCH_CHECK(false, "fsdp: rank ", env.rank, " of ", env.world_size,
              " could not finish the rendezvous: while it connected and waited for the others, "
              "the rendezvous store at ",
              where(env), " stopped answering for ", timeout.count(),
              " ms: is rank 0 stopped or hung? Check that its process is running, or raise the "
              "timeout (--timeout, FSDP_COMM_TIMEOUT)");
}

}  // namespace fsdp::comm
