#pragma once
// --nnodes MIN:MAX: a job that goes on with the nodes still there.
//
// [Note: elastic membership]
// Each node's fsdp-run (its agent) keeps one TCP connection to node 0's
// agent, which hosts the rendezvous at --master-addr:--master-port. Node 0
// forms each round, one start of the whole job, from the agents that have
// joined: at once when MAX have, or once at least MIN have and the last call
// (--rdzv-last-call) has passed since the round opened; with fewer than MIN
// after --rdzv-timeout the job fails. Node ranks follow the nodes' ids
// (--node-rank), node 0 first, so RANK and WORLD_SIZE are renumbered with no
// gaps, and the workers' store is on node 0 at --master-port + 1.
// A round ends when every node's workers have finished. The first failure
// anywhere, a worker, or a node whose connection drops (its agent was
// killed, its machine died), stops the round on every node, and node 0
// applies [Note: restarts] once for the whole job: the next round forms from
// the agents still connected, plus any that joined during the round (a node
// that comes back rejoins at the next restart). The program resumes at the
// new world size from its checkpoints (fsdp-train --resume auto keeps the
// global batch). Node 0 is the one node the job cannot lose: without it the
// others stop their workers and exit 1, naming it.
//
// The messages, one line each (a node joins once; its EXIT also joins it to
// the next round, so it never writes to node 0 after that):
//   agent -> node 0   JOIN <node-id> <nproc-per-node>
//                     EXIT <round> <exit-code> <kind> <rank> <step|-> <how>
//   node 0 -> agent   START <round> <node-rank> <nnodes> <restart-count> <failure-time|->
//                     STOP <round> <why>
//                     END <exit-code> <why>
// where <kind> is ok, failed, nostart, interrupted or stopped (by another
// node's failure).

#include <string>

#include "launch_options.h"
#include "supervisor.h"

namespace fsdp_run {

// Runs this node's part of an elastic job to its end, as node 0 (the host)
// or as one of the others. Returns what fsdp-run exits with.
// SignalPipe::install() must have been called.
JobOutcome run_elastic_job(const LaunchOptions& opts, const std::string& program_path);

}  // namespace fsdp_run
