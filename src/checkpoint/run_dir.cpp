#include "fsdp/checkpoint/run_dir.h"

#include <algorithm>
#include <filesystem>

#include "checkpoint/index.h"
#include "fsdp/checkpoint/reader.h"
#include "fsdp/error_message.h"
#include "fsdp/file_tree.h"

namespace fsdp::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFinal = "checkpoint";
constexpr const char* kPeriodic = "checkpoints";
constexpr const char* kPartialMark = ".partial-";

bool is_partial_name(const fs::path& path) {
  return path.filename().string().find(kPartialMark) != std::string::npos;
}

int64_t step_of(const std::string& dir) {
  try {
    return read_index(dir).step;
  } catch (const std::exception&) {
    return -1;  // listed, and rejected with its reason by the verifier
  }
}

// Directory entries of `dir` (none if it is not a directory), sorted by name.
std::vector<fs::path> entries_of(const fs::path& dir) {
  std::vector<fs::path> entries;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return entries;
  for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  return entries;
}

// The bytes of the regular files under `path`, of those that can be read: the
// figure is only reported.
int64_t tree_bytes(const std::string& path) {
  int64_t bytes = 0;
  try {
    for (const std::string& file : regular_files_under(path)) {
      std::error_code ec;
      const auto size = fs::file_size(file, ec);
      if (!ec) bytes += static_cast<int64_t>(size);
    }
  } catch (const std::runtime_error&) {  // part of the tree unreadable: so is the count
  }
  return bytes;
}

}  // namespace

bool is_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kIndexFileName, ec);
}

bool is_run_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(fs::path(dir) / kFinal, ec) ||
         fs::is_directory(fs::path(dir) / kPeriodic, ec);
}

std::vector<FoundCheckpoint> checkpoints_in_run_dir(const std::string& run_dir) {
  std::vector<FoundCheckpoint> found;
  const fs::path final_dir = fs::path(run_dir) / kFinal;
  if (is_checkpoint_dir(final_dir.string())) found.push_back({final_dir.string(), 0});
  for (const fs::path& entry : entries_of(fs::path(run_dir) / kPeriodic)) {
    if (!is_partial_name(entry) && is_checkpoint_dir(entry.string())) {
      found.push_back({entry.string(), 0});
    }
  }
  for (auto& f : found) f.step = step_of(f.dir);
  // Stable: at equal steps the final checkpoint, listed first, stays first.
  std::stable_sort(found.begin(), found.end(),
                   [](const FoundCheckpoint& a, const FoundCheckpoint& b) { return a.step > b.step; });
  return found;
}

LatestCheckpoint latest_verified_checkpoint(const std::string& run_dir) {
  LatestCheckpoint latest;
  for (const FoundCheckpoint& candidate : checkpoints_in_run_dir(run_dir)) {
    try {
      Reader::open(candidate.dir).verify_all();
      latest.chosen = candidate;
      break;
    } catch (const std::exception& e) {
      latest.rejected.push_back(candidate.dir + ": " + error_message(e));
    }
  }
  return latest;
}

std::vector<std::string> partial_checkpoints_in_run_dir(const std::string& run_dir) {
  std::vector<std::string> partials;
  const fs::path run(run_dir);
  for (const fs::path& dir : {run, run / kPeriodic}) {
    for (const fs::path& entry : entries_of(dir)) {
      std::error_code ec;
      if (is_partial_name(entry) && fs::is_directory(entry, ec)) partials.push_back(entry.string());
    }
  }
  return partials;
}

CleanReport clean_partial_checkpoints(const std::string& run_dir) {
  CleanReport report;
  for (const std::string& partial : partial_checkpoints_in_run_dir(run_dir)) {
    const int64_t bytes = tree_bytes(partial);
    if (!remove_tree(partial).empty()) continue;  // still there: listed again next time
    report.removed.push_back(partial);
    report.bytes += bytes;
  }
  return report;
}

}  // namespace fsdp::ckpt
