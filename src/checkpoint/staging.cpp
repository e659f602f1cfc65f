#include "checkpoint/staging.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <cstdio>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <random>

#include "checkpoint/atomic_file.h"
#include "checkpoint/index.h"
#include "fsdp/file_tree.h"

namespace fsdp::ckpt::detail {

namespace fs = std::filesystem;

void check_target(const std::string& dir, bool overwrite) {
  TORCH_CHECK(!dir.empty(), "fsdp: checkpoint directory path is empty");
  std::error_code ec;
  const std::string parent = parent_directory(fs::path(dir).lexically_normal().string());
  TORCH_CHECK(fs::exists(parent, ec), "fsdp: cannot save checkpoint to '", dir, "': parent directory '",
              parent, "' does not exist; create it first");
  TORCH_CHECK(fs::is_directory(parent, ec), "fsdp: cannot save checkpoint to '", dir, "': '", parent,
              "' is not a directory");
  TORCH_CHECK(::access(parent.c_str(), W_OK | X_OK) == 0, "fsdp: cannot save checkpoint to '", dir,
              "': parent directory '", parent, "' is not writable: ", errno_text());
  if (!fs::exists(fs::symlink_status(dir, ec))) return;
  TORCH_CHECK(overwrite, "fsdp: checkpoint directory '", dir,
              "' already exists; pass overwrite=true (fsdp-ckpt: --overwrite) to replace it, or "
              "choose another directory");
  TORCH_CHECK(fs::is_directory(dir, ec), "fsdp: cannot replace '", dir, "': it exists and is not a directory");
  const bool is_checkpoint = fs::exists(fs::path(dir) / kIndexFileName, ec);
  TORCH_CHECK(is_checkpoint || fs::is_empty(dir, ec), "fsdp: refusing to replace '", dir,
              "': it is a non-empty directory without ", kIndexFileName,
              ", so not a libfsdp checkpoint; remove it yourself if it should go");
}

std::string new_staging_id() {
  std::random_device rd;
  char id[32];
  std::snprintf(id, sizeof(id), "%d-%08x", static_cast<int>(::getpid()), static_cast<unsigned>(rd()));
  return id;
}

std::string staging_path(const std::string& dir, const std::string& id) {
  std::string base = fs::path(dir).lexically_normal().string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base + ".partial-" + id;
}

void create_staging(const std::string& staging) {
  std::error_code ec;
  TORCH_CHECK(fs::create_directory(staging, ec) && !ec, "fsdp: cannot create staging directory '", staging,
              "': ", ec ? ec.message() : std::string("it already exists"));
}

void commit_staging(const std::string& staging, const std::string& dir, bool overwrite) {
  std::string target = fs::path(dir).lexically_normal().string();
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  const std::string parent = parent_directory(target);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(target, ec))) {
    TORCH_CHECK(::rename(staging.c_str(), target.c_str()) == 0, "fsdp: cannot rename '", staging, "' to '",
                target, "': ", errno_text());
    fsync_directory(parent);
    return;
  }
  TORCH_CHECK(overwrite, "fsdp: checkpoint directory '", target, "' appeared during the save; not replacing it "
              "without overwrite");
  // Swap atomically: at every instant `target` is either the old or the new
  // checkpoint. Afterwards `staging` holds the old one.
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_directory(parent);
    remove_tree(staging);  // the old checkpoint; left behind if it cannot go
    return;
  }
  TORCH_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "fsdp: cannot exchange '", staging,
              "' with '", target, "': ", errno_text());
  // Filesystems without RENAME_EXCHANGE: move the old one aside first. A
  // crash between the two renames leaves the old checkpoint at
  // "<dir>.partial-<id>.old".
  const std::string old = staging + ".old";
  TORCH_CHECK(::rename(target.c_str(), old.c_str()) == 0, "fsdp: cannot move '", target, "' aside to '", old,
              "': ", errno_text());
  TORCH_CHECK(::rename(staging.c_str(), target.c_str()) == 0, "fsdp: cannot rename '", staging, "' to '",
              target, "': ", errno_text(), " (the previous checkpoint is at '", old, "')");
  fsync_directory(parent);
  remove_tree(old);
}

void publish_checkpoint(const std::string& staging, const Index& index, const std::string& dir,
                        bool overwrite) {
  write_index(staging, index);
  fsync_directory(staging);
  commit_staging(staging, dir, overwrite);
}

}  // namespace fsdp::ckpt::detail
