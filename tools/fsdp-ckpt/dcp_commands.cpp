// fsdp-ckpt import-dcp and export-dcp: PyTorch's Distributed Checkpoint
// (DCP) in and out. [Note: DCP through the user's Python]
// DCP's .metadata file is a Python pickle of PyTorch classes, which only
// PyTorch reads faithfully, so dcp_convert.py does the DCP half on the
// user's python3 and PyTorch, and a safetensors file of whole tensors
// passes between it and the library (consolidate, import_safetensors). The
// script lives in <prefix>/libexec/libfsdp/ (build/libexec/libfsdp/ in the
// build tree), found from this program's own path.

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "fsdp/checkpoint/convert.h"
#include "fsdp/checkpoint/reader.h"

extern char** environ;

namespace fsdp_ckpt {

namespace fs = std::filesystem;

namespace {

constexpr int kConverterFoundNoTorch = 3;  // dcp_convert.py's exit status

fs::path converter_script() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path script =
      self.parent_path().parent_path() / "libexec" / "libfsdp" / "dcp_convert.py";
  if (ec || !fs::exists(script)) {
    throw std::runtime_error(fmt::format(
        "the DCP converter is missing: expected it at '{}' (installed with fsdp-ckpt); reinstall "
        "libfsdp, or run the fsdp-ckpt of a build tree",
        script.string()));
  }
  return script;
}

// A file removed when this goes out of scope: the safetensors in between.
class ScratchFile {
 public:
  explicit ScratchFile(std::string path) : path_(std::move(path)) {}
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Beside `out`, so the copy stays on the same file system.
std::string scratch_path(const std::string& out) {
  return fmt::format("{}.dcp-{}.safetensors", out, getpid());
}

void check_new_output(const std::string& out, bool overwrite) {
  std::error_code ec;
  if (!overwrite && fs::exists(out, ec)) {
    throw std::runtime_error(
        fmt::format("'{}' exists; choose another --out, or remove it first", out));
  }
}

// Runs dcp_convert.py COMMAND IN OUT on options.python; throws unless it
// succeeds. Its own messages go straight to our stderr.
void run_converter(const DcpOptions& options, const std::string& command, const std::string& in,
                   const std::string& out) {
  const std::string script = converter_script().string();
  std::vector<std::string> args = {
      options.python,    script,        command,          in, out, "--model-key",
      options.model_key, "--optim-key", options.optim_key};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int error = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ)) {
    throw std::runtime_error(fmt::format(
        "{} needs python3 with PyTorch 2.3+ to read and write DCP, and could not run '{}': {}; "
        "install them (Debian: python3-torch), or pass --python with the path of one",
        command == "to-safetensors" ? "import-dcp" : "export-dcp", options.python,
        std::strerror(error)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kConverterFoundNoTorch) {
    throw std::runtime_error(
        fmt::format("'{}' has no usable PyTorch (said above)", options.python));
  }
  throw std::runtime_error(
      fmt::format("the DCP converter ({} {} {}) failed with {}; its message is above",
                  options.python, script, command,
                  WIFEXITED(status) ? fmt::format("exit status {}", WEXITSTATUS(status))
                                    : fmt::format("signal {}", WTERMSIG(status))));
}

}  // namespace

int import_dcp(const std::string& dcp_dir, const std::string& out, int world_size, bool overwrite,
               const DcpOptions& options) {
  if (!fs::exists(fs::path(dcp_dir) / ".metadata")) {
    throw std::runtime_error(fmt::format(
        "'{}' is not a PyTorch Distributed Checkpoint: it has no .metadata file", dcp_dir));
  }
  check_new_output(out, overwrite);
  const ScratchFile whole(scratch_path(out));
  run_converter(options, "to-safetensors", dcp_dir, whole.path());
  fsdp::ckpt::import_safetensors(whole.path(), world_size, out, overwrite);
  fmt::print("wrote {} for {} ranks (step {})\n", out, world_size,
             fsdp::ckpt::Reader::open(out).step());
  return 0;
}

int export_dcp(const std::string& dir, const std::string& out, const DcpOptions& options) {
  check_new_output(out, /*overwrite=*/false);
  const ScratchFile whole(scratch_path(out));
  fsdp::ckpt::consolidate(dir, whole.path(), /*overwrite=*/false);
  run_converter(options, "from-safetensors", whole.path(), out);
  fmt::print("wrote {}\n", out);
  return 0;
}

}  // namespace fsdp_ckpt
