#pragma once
// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// when the object goes out of scope (fsdp::remove_tree: see [Note: no
// std::filesystem tree walks beside a torch wheel] in fsdp/file_tree.h).

#include <c10/util/Exception.h>

#include <filesystem>
#include <string>

#include <stdlib.h>

#include "fsdp/file_tree.h"

namespace fsdp::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fsdp-test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    TORCH_CHECK(::mkdtemp(pattern.data()) != nullptr, "TempDir: cannot create ", pattern);
    path_ = pattern;
  }
  ~TempDir() { fsdp::remove_tree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace fsdp::testing
