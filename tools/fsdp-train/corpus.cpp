#include "corpus.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "fsdp/file_tree.h"
#include "train_options.h"

namespace fsdp_train {
namespace {

namespace fs = std::filesystem;

constexpr double kTrainFraction = 0.9;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(fmt::format("cannot read data file '{}': {}", path.string(),
                                         std::strerror(errno)));
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool looks_like_text(const std::vector<uint8_t>& bytes) {
  return std::find(bytes.begin(), bytes.end(), uint8_t{0}) == bytes.end();
}

void add_file(ByteCorpus& corpus, const fs::path& path, const std::vector<uint8_t>& bytes) {
  const auto split = static_cast<size_t>(static_cast<double>(bytes.size()) * kTrainFraction);
  corpus.train.insert(corpus.train.end(), bytes.begin(), bytes.begin() + split);
  corpus.val.insert(corpus.val.end(), bytes.begin() + split, bytes.end());
  corpus.files.push_back(path.string());
  uint64_t h = corpus.checksum == 0 ? 0xcbf29ce484222325ULL : corpus.checksum;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ULL;
  corpus.checksum = h;
}

// Every regular, plain-text file under the fortunes directory, by name. The
// strfile indexes (.dat) are binary and the .u8 names are symlinks to the
// text files, so both are skipped.
ByteCorpus load_fortunes() {
  const fs::path dir = kFortunesDir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw std::runtime_error(fmt::format(
        "the default corpus {} is not installed; install it with `make deps` (or `apt-get install "
        "fortunes`), or pass --data FILE with any text file",
        dir.string()));
  }
  std::vector<fs::path> paths;
  for (const fs::path file : fsdp::regular_files_under(dir.string())) {
    const std::string ext = file.extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    paths.push_back(file);
  }
  std::sort(paths.begin(), paths.end());  // path order, component by component
  ByteCorpus corpus;
  corpus.source = dir.string();
  for (const auto& path : paths) {
    std::vector<uint8_t> bytes = read_bytes(path);
    if (bytes.empty() || !looks_like_text(bytes)) continue;
    add_file(corpus, path, bytes);
  }
  if (corpus.files.empty()) {
    throw std::runtime_error(fmt::format(
        "the default corpus {} holds no text files; reinstall it (`apt-get install --reinstall "
        "fortunes`) or pass --data FILE",
        dir.string()));
  }
  return corpus;
}

ByteCorpus load_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    throw std::runtime_error(fmt::format(
        "data file '{}' does not exist; pass --data with the path of a text file, or leave --data "
        "out to train on the fortunes corpus",
        path));
  }
  if (!fs::is_regular_file(status)) {
    throw std::runtime_error(
        fmt::format("data path '{}' is not a regular file; pass --data with a text file", path));
  }
  std::vector<uint8_t> bytes = read_bytes(path);
  if (!looks_like_text(bytes)) {
    throw std::runtime_error(fmt::format(
        "data file '{}' contains NUL bytes, so it is not text; pass --data with a text file",
        path));
  }
  ByteCorpus corpus;
  corpus.source = path;
  add_file(corpus, path, bytes);
  return corpus;
}

}  // namespace

ByteCorpus load_corpus(const std::string& path, int64_t context) {
  ByteCorpus corpus = path.empty() ? load_fortunes() : load_file(path);
  // Windows hold context + 1 bytes (inputs and the shifted targets), and the
  // validation part must hold at least one.
  const int64_t needed = context + 2;
  if (static_cast<int64_t>(corpus.val.size()) < needed ||
      static_cast<int64_t>(corpus.train.size()) < needed) {
    throw std::runtime_error(fmt::format(
        "data '{}' has {} bytes ({} train, {} validation); --context {} needs at least {} bytes "
        "in each part (10% is held out for validation), so at least {} bytes in all; pass a "
        "larger file or a smaller --context",
        corpus.source, corpus.total_bytes(), corpus.train.size(), corpus.val.size(), context,
        needed, static_cast<int64_t>(needed / (1 - kTrainFraction)) + 1));
  }
  return corpus;
}

BatchSampler::BatchSampler(const ByteCorpus& corpus, int64_t context, uint64_t seed)
    : corpus_(corpus), context_(context), seed_(seed) {}

const std::vector<uint8_t>& BatchSampler::bytes(Split split) const {
  return split == Split::kTrain ? corpus_.train : corpus_.val;
}

int64_t BatchSampler::window_start(Split split, int64_t index, int64_t row) const {
  const auto n = static_cast<int64_t>(bytes(split).size());
  const uint64_t range = static_cast<uint64_t>(n - context_);  // starts 0 .. n - context - 1
  uint64_t h = splitmix64(seed_);
  h = splitmix64(h ^ (split == Split::kTrain ? 0x7472ULL : 0x76616cULL));
  h = splitmix64(h ^ static_cast<uint64_t>(index));
  h = splitmix64(h ^ static_cast<uint64_t>(row));
  return static_cast<int64_t>(h % range);
}

Batch BatchSampler::rows(Split split, int64_t index, int64_t first_row, int64_t rows) const {
  const std::vector<uint8_t>& data = bytes(split);
  at::Tensor window = at::empty({rows, context_ + 1}, at::kLong);
  int64_t* out = window.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = window_start(split, index, first_row + r);
    for (int64_t t = 0; t <= context_; ++t) out[r * (context_ + 1) + t] = data[start + t];
  }
  return {window.narrow(1, 0, context_).contiguous(), window.narrow(1, 1, context_).contiguous()};
}

}  // namespace fsdp_train
