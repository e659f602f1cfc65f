#include "elastic_messages.h"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <utility>
#include <vector>

#include "line_channel.h"

namespace fsdp_run {
namespace {

constexpr std::array<std::pair<NodeReport::Kind, const char*>, 5> kKinds = {{
    {NodeReport::Kind::kOk, "ok"},
    {NodeReport::Kind::kFailed, "failed"},
    {NodeReport::Kind::kNoStart, "nostart"},
    {NodeReport::Kind::kInterrupted, "interrupted"},
    {NodeReport::Kind::kStopped, "stopped"},
}};

std::optional<long long> to_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0') return std::nullopt;
  return value;
}

}  // namespace

NodeReport report_of(const JobOutcome& outcome, std::optional<int64_t> step) {
  NodeReport report;
  report.exit_code = outcome.exit_code;
  if (outcome.interrupted) {
    report.kind = NodeReport::Kind::kInterrupted;
  } else if (outcome.start_failed) {
    report.kind = NodeReport::Kind::kNoStart;
  } else if (outcome.failure) {
    report.kind = NodeReport::Kind::kFailed;
  } else if (!outcome.stopped_from_outside.empty()) {
    report.kind = NodeReport::Kind::kStopped;
  }
  if (outcome.failure) {
    report.rank = outcome.failure->rank;
    report.how = outcome.failure->how;
    report.step = step;
  }
  return report;
}

JobOutcome outcome_of(const NodeReport& report) {
  JobOutcome outcome;
  outcome.exit_code = report.exit_code;
  outcome.start_failed = report.kind == NodeReport::Kind::kNoStart;
  outcome.interrupted = report.kind == NodeReport::Kind::kInterrupted;
  if (report.is_failure()) {
    outcome.failure = WorkerFailure{report.rank, report.how, std::chrono::system_clock::now()};
  }
  return outcome;
}

std::string start_line(const RoundPlan& plan) {
  return fmt::format("START {} {} {} {} {}", plan.round, plan.node_rank, plan.nnodes,
                     plan.restart_count, plan.failure_time.empty() ? "-" : plan.failure_time);
}

std::optional<RoundPlan> parse_start(const std::string& line) {
  const std::vector<std::string> f = split_fields(line, 5);
  if (f.size() != 6 || f[0] != "START") return std::nullopt;
  const auto round = to_number(f[1]), rank = to_number(f[2]), nnodes = to_number(f[3]),
             restarts = to_number(f[4]);
  if (!round || !rank || !nnodes || !restarts) return std::nullopt;
  return RoundPlan{static_cast<int>(*round), static_cast<int>(*rank), static_cast<int>(*nnodes),
                   static_cast<int>(*restarts), f[5] == "-" ? "" : f[5]};
}

std::string exit_line(int round, const NodeReport& report) {
  const char* kind = "ok";
  for (const auto& [k, name] : kKinds) {
    if (k == report.kind) kind = name;
  }
  return fmt::format("EXIT {} {} {} {} {} {}", round, report.exit_code, kind, report.rank,
                     report.step ? std::to_string(*report.step) : "-", report.how);
}

std::optional<std::pair<int, NodeReport>> parse_exit(const std::string& line) {
  const std::vector<std::string> f = split_fields(line, 6);
  if (f.size() != 7 || f[0] != "EXIT") return std::nullopt;
  const auto round = to_number(f[1]), code = to_number(f[2]), rank = to_number(f[4]);
  if (!round || !code || !rank) return std::nullopt;
  NodeReport report;
  bool known_kind = false;
  for (const auto& [k, name] : kKinds) {
    if (f[3] == name) {
      report.kind = k;
      known_kind = true;
    }
  }
  if (!known_kind) return std::nullopt;
  report.exit_code = static_cast<int>(*code);
  report.rank = static_cast<int>(*rank);
  if (const auto step = to_number(f[5])) report.step = *step;
  report.how = f[6];
  return std::make_pair(static_cast<int>(*round), report);
}

}  // namespace fsdp_run
