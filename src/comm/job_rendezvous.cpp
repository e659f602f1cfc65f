#include "fsdp/comm/job_rendezvous.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <unistd.h>

#include <thread>

#include "comm/gloo_address.h"
#include "comm/rendezvous_store.h"

namespace fsdp {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kReadCount = "fsdp/readiness/read";

std::string readiness_key(int rank) { return "fsdp/readiness/" + std::to_string(rank); }

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}

// The host name, then each problem, separated by NUL bytes (host names and
// messages hold none).
std::vector<uint8_t> encode(const std::vector<std::string>& problems) {
  std::string text = this_host();
  for (const auto& p : problems) text += '\0' + p;
  return {text.begin(), text.end()};
}

RankNotReady decode(int rank, const std::vector<uint8_t>& bytes) {
  RankNotReady r;
  r.rank = rank;
  std::vector<std::string> fields(1);
  for (uint8_t byte : bytes) {
    if (byte == 0) fields.emplace_back(); else fields.back() += static_cast<char>(byte);
  }
  r.host = fields.front();
  r.problems.assign(fields.begin() + 1, fields.end());
  return r;
}

// Runs one operation on the store. Its failure means the store's server,
// rank 0, went away; the error says so rather than just "Broken pipe".
template <typename Operation>
auto on_store(const LaunchEnv& env, Operation&& operation) -> decltype(operation()) {
  try {
    return operation();
  } catch (const std::exception& e) {
    comm::throw_store_stopped_answering(env, "shared whether it can start", e);
  }
}

// Every rank reached the rendezvous, so each publishes at once; the deadline
// only matters if one died in between.
void wait_for_every_verdict(c10d::Store& store, const LaunchEnv& env,
                            std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(readiness_key(r));
  const auto deadline = Clock::now() + timeout;
  while (!on_store(env, [&] { return store.check(keys); })) {
    TORCH_CHECK(Clock::now() < deadline, "fsdp: rank ", env.rank, " of ", env.world_size,
                ": a rank reached the rendezvous but never said whether it is ready to start "
                "within ", timeout.count(), " ms (did it die?). Check every rank's output");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Rank 0 serves the store: it stays until every rank has read the verdicts,
// or the timeout, so a job that stops here stops everywhere with the reasons.
void wait_until_every_rank_has_read(c10d::Store& store, const LaunchEnv& env,
                                    std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (store.add(kReadCount, 0) < env.world_size && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

JobRendezvous::JobRendezvous(const LaunchEnv& env, const std::vector<std::string>& problems,
                             std::chrono::milliseconds timeout)
    : env_(env) {
  // See [Note: ranks stop together on a problem one of them found] in
  // include/fsdp/comm/job_rendezvous.h.
  store_ = comm::join_rendezvous(env_, timeout);
  c10d::Store& store = *store_;
  on_store(env_, [&] { store.set(readiness_key(env_.rank), encode(problems)); });
  wait_for_every_verdict(store, env_, timeout);
  for (int r = 0; r < env_.world_size; ++r) {
    RankNotReady verdict = decode(r, on_store(env_, [&] { return store.get(readiness_key(r)); }));
    if (!verdict.problems.empty()) not_ready_.push_back(std::move(verdict));
  }
  on_store(env_, [&] { return store.add(kReadCount, 1); });
  if (env_.rank == 0) wait_until_every_rank_has_read(store, env_, timeout);
}

JobRendezvous::~JobRendezvous() = default;
JobRendezvous::JobRendezvous(JobRendezvous&&) noexcept = default;
JobRendezvous& JobRendezvous::operator=(JobRendezvous&&) noexcept = default;

ProcessGroupPtr JobRendezvous::create_world(GroupOptions options) const {
  TORCH_CHECK(not_ready_.empty(), "fsdp: rank ", env_.rank, ": create_world() called although ",
              not_ready_.size(), " rank(s) are not ready to start (rank ", not_ready_.front().rank,
              ": ", not_ready_.front().problems.front(), "); stop instead, as every rank does");
  // 127.0.0.1 is unreachable from other hosts. See [Note: the address Gloo binds to].
  options.hostname =
      comm::gloo_hostname_for_job(options.hostname, env_.master_addr, env_.master_port);
  return make_process_group(store_, env_.rank, env_.world_size, std::move(options));
}

}  // namespace fsdp
