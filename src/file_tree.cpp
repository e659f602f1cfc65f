#include "fsdp/file_tree.h"

#include <fts.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace fsdp {
namespace {

// An fts walk of one tree, physical (symbolic links are entries, never
// followed) and without changing the working directory, which is
// process-wide.
struct FtsCloser {
  void operator()(FTS* fts) const { ::fts_close(fts); }
};
using FtsWalk = std::unique_ptr<FTS, FtsCloser>;

FtsWalk open_walk(const std::string& root) {
  char* roots[] = {const_cast<char*>(root.c_str()), nullptr};
  return FtsWalk(::fts_open(roots, FTS_PHYSICAL | FTS_NOCHDIR, nullptr));
}

// The walk's next entry; nullptr at its end, with errno 0, or on an error,
// with errno set.
FTSENT* next_entry(FTS* walk) {
  errno = 0;
  return ::fts_read(walk);
}

std::string describe(const char* what, const char* path, int error) {
  return std::string(what) + " " + path + ": " + std::strerror(error);
}

}  // namespace

std::string remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? "" : describe("cannot inspect", path.c_str(), errno);
  }
  FtsWalk walk = open_walk(path);
  if (!walk) return describe("cannot walk", path.c_str(), errno);
  while (FTSENT* entry = next_entry(walk.get())) {
    switch (entry->fts_info) {
      case FTS_D:  // removed in post-order (FTS_DP), once emptied
        break;
      case FTS_DP:
        if (::rmdir(entry->fts_accpath) != 0 && errno != ENOENT) {
          return describe("cannot remove", entry->fts_path, errno);
        }
        break;
      case FTS_DNR:
      case FTS_ERR:
      case FTS_NS:
        if (entry->fts_errno == ENOENT) break;  // removed by someone else meanwhile
        return describe("cannot read", entry->fts_path, entry->fts_errno);
      default:  // files, symbolic links, sockets, fifos, devices
        if (::unlink(entry->fts_accpath) != 0 && errno != ENOENT) {
          return describe("cannot remove", entry->fts_path, errno);
        }
    }
  }
  return errno == 0 ? "" : describe("cannot walk", path.c_str(), errno);
}

void remove_tree_or_throw(const std::string& path) {
  const std::string error = remove_tree(path);
  if (!error.empty()) throw std::runtime_error(error);
}

std::vector<std::string> regular_files_under(const std::string& dir) {
  FtsWalk walk = open_walk(dir);
  if (!walk) throw std::runtime_error(describe("cannot walk", dir.c_str(), errno));
  std::vector<std::string> files;
  while (FTSENT* entry = next_entry(walk.get())) {
    switch (entry->fts_info) {
      case FTS_F:
        files.emplace_back(entry->fts_path);
        break;
      case FTS_DNR:
      case FTS_ERR:
      case FTS_NS:
        throw std::runtime_error(describe("cannot read", entry->fts_path, entry->fts_errno));
      default:
        break;
    }
  }
  if (errno != 0) throw std::runtime_error(describe("cannot walk", dir.c_str(), errno));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace fsdp
