#include "run_dir.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "fsdp/checkpoint/run_dir.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/file_tree.h"

namespace fsdp_train {
namespace {

namespace fs = std::filesystem;

std::string timestamp_name() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y%m%d-%H%M%S", &local);
  return buffer;
}

// One indented line per rejected checkpoint, each after a line break.
std::string rejected_lines(const std::vector<std::string>& rejected) {
  std::string lines;
  for (const auto& r : rejected) lines += "\n  " + r;
  return lines;
}

}  // namespace

std::string check_run_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path path = fs::absolute(dir, ec);
  if (fs::exists(path, ec)) {
    if (!fs::is_directory(path, ec)) {
      return fmt::format("run dir '{}' exists but is not a directory; pass another --run-dir", dir);
    }
    if (::access(path.c_str(), W_OK | X_OK) != 0) {
      return fmt::format("cannot write into run dir '{}': {}; pass a --run-dir in a writable place",
                         dir, std::strerror(errno));
    }
    return "";
  }
  fs::path ancestor = path.parent_path();
  while (!ancestor.empty() && !fs::exists(ancestor, ec) && ancestor != ancestor.root_path()) {
    ancestor = ancestor.parent_path();
  }
  if (!fs::is_directory(ancestor, ec)) {
    return fmt::format("cannot create run dir '{}': '{}' is not a directory; pass a --run-dir in "
                       "a writable place",
                       dir, ancestor.string());
  }
  if (::access(ancestor.c_str(), W_OK | X_OK) != 0) {
    return fmt::format("cannot create run dir '{}': '{}' is not writable ({}); pass a --run-dir "
                       "in a writable place",
                       dir, ancestor.string(), std::strerror(errno));
  }
  return "";
}

std::string probe_writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return fmt::format("cannot create {} '{}': {}; pass a {} in a writable place", what, dir,
                       ec.message(), what == "run dir" ? "--run-dir" : "directory");
  }
  if (!fs::is_directory(dir, ec)) {
    return fmt::format("{} '{}' exists but is not a directory; pass another --run-dir", what, dir);
  }
  const std::string probe =
      (fs::path(dir) / fmt::format(".fsdp-train-probe-{}-{}", ::gethostid(), ::getpid())).string();
  std::FILE* file = std::fopen(probe.c_str(), "w");
  if (file == nullptr || std::fputs("probe\n", file) < 0 || std::fclose(file) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(probe.c_str());
    return fmt::format("cannot write into {} '{}': {}; pass a --run-dir in a writable place", what,
                       dir, reason);
  }
  std::remove(probe.c_str());
  return "";
}

std::string agree_on_run_dir(fsdp::ProcessGroup& world, const std::string& requested) {
  std::string mine;
  std::string error;
  if (world.rank() == 0) {
    if (!requested.empty()) {
      mine = requested;
    } else {
      // Rank 0 names and creates it atomically, so two runs started in the
      // same second get different directories.
      const std::string base = (fs::path("runs") / timestamp_name()).string();
      std::error_code ec;
      fs::create_directories("runs", ec);
      for (int attempt = 1; attempt < 1000; ++attempt) {
        const std::string candidate = attempt == 1 ? base : fmt::format("{}-{}", base, attempt);
        if (fs::create_directory(candidate, ec)) {
          mine = candidate;
          break;
        }
        if (ec) {
          error = fmt::format("cannot create run dir '{}': {}; pass a --run-dir in a writable "
                              "place",
                              candidate, ec.message());
          break;
        }
      }
      if (mine.empty() && error.empty()) error = "cannot find a free run dir name under runs/";
    }
  }
  const std::string chosen = fsdp::all_gather_strings(world, mine)[0];
  if (error.empty() && !chosen.empty()) error = probe_writable_dir(chosen, "run dir");
  fail_together(world, error);
  return chosen;
}

std::string final_checkpoint_dir(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoint").string();
}

std::string step_checkpoint_dir(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / fmt::format("step-{:08d}", step)).string();
}

std::vector<std::string> prune_step_checkpoints(const std::string& run_dir, int64_t keep_last) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  const fs::path periodic = fs::path(run_dir) / "checkpoints";
  int64_t kept = 0;
  for (const auto& found : fsdp::ckpt::checkpoints_in_run_dir(run_dir)) {  // newest first
    if (fs::path(found.dir).parent_path() != periodic) continue;
    if (kept++ < keep_last) continue;
    if (fsdp::remove_tree(found.dir).empty()) removed.push_back(found.dir);
  }
  return removed;
}

ResumeChoice resolve_resume_dir(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw std::runtime_error(fmt::format(
        "--resume '{}' does not exist; pass a checkpoint directory (a run's checkpoint/ or "
        "checkpoints/step-NNNNNNNN/) or a run dir",
        path));
  }
  // A checkpoint named by the user is taken as asked: no silent substitute.
  if (fsdp::ckpt::is_checkpoint_dir(path)) return {path, {}};
  const fsdp::ckpt::LatestCheckpoint latest = fsdp::ckpt::latest_verified_checkpoint(path);
  if (latest.chosen) return {latest.chosen->dir, latest.rejected};
  throw std::runtime_error(fmt::format(
      "--resume '{}' holds no checkpoint that verifies (looked for index.json in it, in its "
      "checkpoint/ and in its checkpoints/step-*/){}{}. Pass a checkpoint directory, or start "
      "a fresh run",
      path, latest.rejected.empty() ? "" : "; rejected:", rejected_lines(latest.rejected)));
}

std::optional<ResumeChoice> resolve_auto_resume(const std::string& run_dir) {
  if (run_dir.empty()) {
    throw std::runtime_error(
        "--resume auto needs --run-dir: it resumes the run dir's newest checkpoint, and "
        "without --run-dir each start gets a new runs/<timestamp>; pass e.g. --resume auto "
        "--run-dir runs/long");
  }
  std::error_code ec;
  if (!fs::exists(run_dir, ec) || fsdp::ckpt::checkpoints_in_run_dir(run_dir).empty()) {
    return std::nullopt;
  }
  const fsdp::ckpt::LatestCheckpoint latest = fsdp::ckpt::latest_verified_checkpoint(run_dir);
  if (latest.chosen) return ResumeChoice{latest.chosen->dir, latest.rejected};
  throw std::runtime_error(fmt::format(
      "--resume auto: run dir '{}' holds checkpoints but none verifies; rejected:{}\nMove "
      "them out of the run dir to start afresh there, or pass --resume with a checkpoint "
      "directory",
      run_dir, rejected_lines(latest.rejected)));
}

void fail_together(fsdp::ProcessGroup& world, const std::string& my_error) {
  const std::vector<std::string> errors =
      world.size() == 1 ? std::vector<std::string>{my_error} : fsdp::all_gather_strings(world, my_error);
  std::string message;
  std::string first;
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    if (errors[rank].empty()) continue;
    if (first.empty()) {
      first = errors[rank];
      message = errors[rank];
      if (errors.size() > 1) message += fmt::format(" (rank {})", rank);
    } else if (errors[rank] != first) {
      message += fmt::format("; rank {}: {}", rank, errors[rank]);
    }
  }
  if (!message.empty()) throw std::runtime_error(message);
}

}  // namespace fsdp_train
