#pragma once
// The job's rendezvous: the TCPStore that rank 0 serves at MASTER_ADDR:
// MASTER_PORT, and the wait until every rank has reached it.
//
// [Note: a deadline on every rendezvous wait]
// TCPStore's own waits are not all bounded: a client whose server accepted
// the connection and then stopped answering (rank 0 SIGSTOPped as its store
// began listening) blocked forever in waitForWorkers. So the rendezvous runs
// on a helper thread and the caller waits for it with GroupOptions::timeout
// (plus two seconds of slack, for TCPStore's own errors and then those of the
// store's per-call deadline, which name the call: see [Note: a deadline on
// every store call], which bounds the calls after the rendezvous too). On
// expiry the caller throws, naming the ranks that never arrived (or rank 0's
// store, if it stopped answering); the helper thread stays blocked and is
// abandoned, which is safe since the process is about to fail. While it
// waits, rank 0 prints a progress line (every 30 s, or a quarter of the
// timeout if shorter) naming the missing ranks and their nodes, so a job
// whose other node never started says so long before it times out.

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

#include "fsdp/comm/launch_env.h"

namespace fsdp::comm {

// Connects to (rank 0: serves) the rendezvous store of the job `env`
// describes, and returns once every rank has. Throws c10::Error after
// `timeout` naming what is missing. Every call on the store returned is
// bounded by `timeout` ([Note: a deadline on every store call]).
c10::intrusive_ptr<c10d::Store> join_rendezvous(const LaunchEnv& env,
                                                std::chrono::milliseconds timeout);

// Throws c10::Error for a store operation that failed with `cause` while this
// rank was `doing` something: the store's server (rank 0) went away.
[[noreturn]] void throw_store_stopped_answering(const LaunchEnv& env, const char* doing,
                                                const std::exception& cause);

}  // namespace fsdp::comm
