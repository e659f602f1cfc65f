// Spawned by test_rendezvous_deadline as real processes: joins the job from
// torchrun's variables through fsdp::JobRendezvous, creates the world group
// and checks one all-reduce.
//
//   rendezvous_probe --timeout-ms=T --stop-rank0-at=POINT
//
// With --stop-rank0-at, rank 0 stops its whole process (SIGSTOP) at POINT,
// seen from a watcher thread with its own connection to the store rank 0
// serves, and never creates the group itself. POINT is
//   arrival  rank 1 has connected and announced its arrival
//   verdict  rank 1 has published whether it can start
//   group    rank 1 has begun creating the world group
// The keys below are libfsdp's own (rendezvous_store.cpp, job_rendezvous.cpp,
// member_barrier.cpp); a test that stops at them is white-box on purpose.
// Exits 0 when the group works, 2 with "rendezvous_probe error: ..." when a
// step throws.

#include <ATen/ATen.h>
#include <signal.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "compat.h"
#include "fsdp/comm/job_rendezvous.h"
#include "fsdp/error_message.h"

namespace {

std::string key_of_point(const std::string& point) {
  if (point == "arrival") return "fsdp/rendezvous/1";
  if (point == "verdict") return "fsdp/readiness/1";
  if (point == "group") return "fsdp/world/joining/1";
  std::fprintf(stderr, "rendezvous_probe: unknown --stop-rank0-at '%s'\n", point.c_str());
  std::exit(64);
}

// Waits for `key` in the store rank 0 serves, then stops this process.
void stop_when_set(const fsdp::LaunchEnv& env, const std::string& key) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = std::chrono::seconds(60);
  fsdp::compat::use_classic_tcpstore_server(options);
  c10d::TCPStore store(env.master_addr, options);
  store.wait({key});
  std::fprintf(stderr, "rendezvous_probe: rank 0 stops at '%s'\n", key.c_str());
  ::raise(SIGSTOP);
}

}  // namespace

int main(int argc, char** argv) {
  std::chrono::milliseconds timeout(20000);
  std::string stop_at;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--timeout-ms=", 0) == 0)
      timeout = std::chrono::milliseconds(std::stol(arg.substr(13)));
    if (arg.rfind("--stop-rank0-at=", 0) == 0) stop_at = arg.substr(16);
  }
  try {
    const fsdp::LaunchEnv env = fsdp::read_launch_env();
    const bool stopping = env.rank == 0 && !stop_at.empty();
    if (stopping) {
      const std::string key = key_of_point(stop_at);
      std::thread([env, key] { stop_when_set(env, key); }).detach();
    }
    const fsdp::JobRendezvous meeting(env, /*problems=*/{}, timeout);
    // Rank 0 waits here to be stopped, so no rank can finish the group.
    while (stopping) std::this_thread::sleep_for(std::chrono::seconds(1));
    fsdp::GroupOptions options;
    options.timeout = timeout;
    const fsdp::ProcessGroupPtr world = meeting.create_world(options);
    at::Tensor one = at::ones({1});
    world->all_reduce(one, fsdp::ReduceOp::kSum)->wait();
    std::printf("rendezvous_probe rank %d: sum %g\n", env.rank, one.item<double>());
    return 0;
  } catch (const std::exception& e) {
    std::printf("rendezvous_probe error: %s\n", fsdp::error_message(e).c_str());
    return 2;
  }
}
