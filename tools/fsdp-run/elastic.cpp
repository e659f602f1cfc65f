// See [Note: elastic membership] in elastic.h.

#include "elastic.h"

#include <unistd.h>

#include <fmt/format.h>

#include <variant>

#include "elastic_agent.h"
#include "elastic_host.h"
#include "line_prefixer.h"
#include "restarts.h"

namespace fsdp_run {
namespace {

JobOutcome exit_with(int code) {
  JobOutcome outcome;
  outcome.exit_code = code;
  return outcome;
}

JobOutcome killed_by(int signal) {
  JobOutcome outcome;
  outcome.launcher_signal = signal;
  outcome.interrupted = true;
  return outcome;
}

// The launch options of one round: its node count and this node's rank in
// it; the workers' store beside the rendezvous.
LaunchOptions round_options(const LaunchOptions& opts, const RoundPlan& plan) {
  LaunchOptions round = opts;
  round.nnodes = plan.nnodes;
  round.node_rank = plan.node_rank;
  round.master_port = opts.master_port + 1;
  return round;
}

AttemptInfo attempt_of(const RoundPlan& plan, ProgressFiles& progress) {
  return AttemptInfo{plan.restart_count, progress.path(plan.restart_count), plan.failure_time};
}

// What ended a round on node 0: its own workers' failure, or another
// node's that came first; nullopt when the round succeeded everywhere.
std::optional<std::pair<JobOutcome, std::optional<int64_t>>> round_failure(
    const JobOutcome& own, const RendezvousHost& host, const ProgressFiles& progress, int restart) {
  if (own.failure) return std::make_pair(own, progress.failed_in_step(restart));
  if (!host.remote_failure()) return std::nullopt;
  JobOutcome cause = outcome_of(*host.remote_failure());
  cause.stop_seconds = own.stop_seconds;
  return std::make_pair(cause, host.remote_failure()->step);
}

JobOutcome run_as_host(const LaunchOptions& opts, const std::string& program_path) {
  std::string error;
  const auto host = RendezvousHost::open(opts, error);
  if (!host) {
    say(fmt::format("cannot host the elastic rendezvous: {}; pick a free --master-port", error));
    return exit_with(1);
  }
  ProgressFiles progress;
  RestartPolicy policy(opts.max_restarts);
  RoundPlan next;  // the restart count and failure time of the next round
  while (true) {
    int signal = 0;
    const auto plan = host->form_round(next.restart_count, next.failure_time, error, signal);
    if (!plan && signal != 0) return killed_by(signal);
    if (!plan) {
      say(error);
      return exit_with(1);
    }
    const JobOutcome own = supervise_workers(round_options(opts, *plan), program_path,
                                             attempt_of(*plan, progress), host.get());
    host->finish_round(own.failure || own.interrupted || !own.stopped_from_outside.empty());
    if (const int s = own.interrupted ? own.launcher_signal : host->interrupted(); s != 0) {
      host->end_job(128 + s, "node 0's fsdp-run was told to stop; the job ends");
      return killed_by(s);
    }
    const auto failure = round_failure(own, *host, progress, plan->restart_count);
    if (!failure) {
      host->end_job(0, "");
      return own;
    }
    const RestartPolicy::Decision decision = policy.after_failure(failure->first, failure->second);
    if (!decision.message.empty()) say(decision.message);
    if (!decision.restart) {
      const auto& f = *failure->first.failure;
      host->end_job(failure->first.exit_code, fmt::format("rank {} {}", f.rank, f.how));
      return failure->first;
    }
    next.restart_count = policy.restarts_done();
    next.failure_time = epoch_seconds(failure->first.failure->at);
  }
}

JobOutcome end_as_told(const JobEnded& ended) {
  if (ended.exit_code != 0 && !ended.why.empty()) say(ended.why);
  return exit_with(ended.exit_code);
}

JobOutcome run_as_agent(const LaunchOptions& opts, const std::string& program_path) {
  std::string error;
  int signal = 0;
  const auto agent = RendezvousAgent::connect(opts, error, signal);
  if (!agent && signal != 0) return killed_by(signal);
  if (!agent) {
    say(error);
    return exit_with(1);
  }
  ProgressFiles progress;
  while (true) {
    const auto answer = agent->next_round(signal);
    if (signal != 0) return killed_by(signal);
    if (const auto* ended = std::get_if<JobEnded>(&answer)) return end_as_told(*ended);
    const RoundPlan& plan = std::get<RoundPlan>(answer);
    say(fmt::format("round {}: node rank {} of {}, world size {}", plan.round, plan.node_rank,
                    plan.nnodes, plan.nnodes * opts.nproc_per_node));
    const JobOutcome own = supervise_workers(round_options(opts, plan), program_path,
                                             attempt_of(plan, progress), agent.get());
    const auto step = own.failure ? progress.failed_in_step(plan.restart_count) : std::nullopt;
    NodeReport report = report_of(own, step);
    if (own.interrupted) {
      report.exit_code = 128 + own.launcher_signal;
      report.rank = plan.node_rank * opts.nproc_per_node;
      report.how = fmt::format("was stopped with node {}'s fsdp-run, which was told to stop",
                               opts.node_rank);
    }
    agent->report(plan.round, report);
    if (own.interrupted) return own;
    if (agent->ended()) return end_as_told(*agent->ended());
  }
}

}  // namespace

JobOutcome run_elastic_job(const LaunchOptions& opts, const std::string& program_path) {
  return opts.node_rank == 0 ? run_as_host(opts, program_path) : run_as_agent(opts, program_path);
}

}  // namespace fsdp_run
