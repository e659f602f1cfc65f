#pragma once
// fsdp::JobRendezvous: the job's ranks meet, learn whether every one of them
// can start, and only then create the world group.
//
//   std::vector<std::string> problems = check_my_inputs();  // empty: ready
//   fsdp::JobRendezvous meeting(fsdp::read_launch_env(), problems, options.timeout);
//   if (!meeting.not_ready().empty()) return 2;  // every rank stops, together
//   select_my_gpu();
//   fsdp::ProcessGroupPtr world = meeting.create_world(options);
//
// [Note: ranks stop together on a problem one of them found]
// A program checks its inputs on every rank before training. Most checks give
// the same verdict everywhere, but some depend on the node: a data file that
// one node lacks, a node without GPUs, a directory one node cannot create. A
// rank that simply exited on such a problem left the ranks of other nodes
// waiting in the rendezvous until the timeout (5 minutes by default), to fail
// naming a missing rank rather than the problem. So every rank joins the
// rendezvous, ready or not, and publishes its problems in the store before
// any backend starts (NCCL cannot start on a node without GPUs). Each rank
// then knows whether all are ready and, if not, which rank and why, within a
// moment of the slowest rank's check.

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>
#include <vector>

#include "fsdp/comm/launch_env.h"
#include "fsdp/comm/process_group.h"

namespace c10d {
class Store;
}

namespace fsdp {

// A rank that gave problems at the rendezvous.
struct RankNotReady {
  int rank = 0;
  std::string host;                   // the host name it runs on
  std::vector<std::string> problems;  // as that rank gave them
};

class JobRendezvous {
 public:
  // Every rank of the job `env` describes constructs one, with its own
  // problems (empty: ready to start). Joins (rank 0: serves) the rendezvous
  // store at MASTER_ADDR:MASTER_PORT, publishes `problems` and reads every
  // rank's. Throws c10::Error naming what is missing when the rendezvous or
  // the exchange does not complete within `timeout`.
  JobRendezvous(const LaunchEnv& env, const std::vector<std::string>& problems,
                std::chrono::milliseconds timeout);
  ~JobRendezvous();  // out of line: c10d::Store is incomplete here
  JobRendezvous(JobRendezvous&&) noexcept;
  JobRendezvous& operator=(JobRendezvous&&) noexcept;

  // The ranks that gave problems, ascending; empty when every rank is ready.
  const std::vector<RankNotReady>& not_ready() const { return not_ready_; }

  // The world group over the rendezvous's store, as init_process_group_from_env
  // makes it (the Gloo address rule included). Collective: every rank calls
  // it, and only when not_ready() is empty.
  ProcessGroupPtr create_world(GroupOptions options) const;

 private:
  LaunchEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<RankNotReady> not_ready_;
};

}  // namespace fsdp
