#pragma once
// A fresh directory under $TMPDIR (or /tmp), removed with everything in it
// when the object goes out of scope.

#include <c10/util/Exception.h>

#include <filesystem>
#include <string>

#include <stdlib.h>

namespace fsdp::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fsdp-test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    TORCH_CHECK(::mkdtemp(pattern.data()) != nullptr, "TempDir: cannot create ", pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
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
