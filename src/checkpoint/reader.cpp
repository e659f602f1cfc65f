#include "fsdp/checkpoint/reader.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/atomic_file.h"
#include "checkpoint/checksum.h"
#include "checkpoint/error_cause.h"
#include "checkpoint/index.h"

namespace fsdp::ckpt {

namespace fs = std::filesystem;

namespace {

// [Note: every byte of a rank file is checked]
// Block checksums cover the data. The index also records each rank file's
// size and the xxh64 of its safetensors header (the 8-byte length and the
// JSON after it), and a reader checks both when it opens the file. So a
// flipped header byte, a damaged length or bytes appended are found by
// `verify` and refused by a load alike. The data blocks alone would not show
// appended bytes or a damaged header, and other safetensors readers misread
// a file with either.
std::string rank_file_problem(const InputFile& file, const FileInfo& info) {
  if (file.size() != info.bytes) {
    return c10::str("has ", file.size(), " bytes but the index records ", info.bytes, " (",
                    file.size() < info.bytes ? "truncated" : "extra bytes appended", ")");
  }
  if (!info.header_checksum) return "";  // saved before headers were checksummed
  uint64_t length = 0;
  if (!file.read_at(0, &length, 8) || length > static_cast<uint64_t>(file.size() - 8)) {
    return "has a damaged safetensors header length";
  }
  std::vector<char> header(static_cast<size_t>(8 + length));
  if (!file.read_at(0, header.data(), static_cast<int64_t>(header.size())) ||
      xxh64(header.data(), static_cast<int64_t>(header.size())) != *info.header_checksum) {
    return "has a damaged safetensors header (its checksum does not match the index)";
  }
  return "";
}

}  // namespace

struct Reader::Files {
  std::mutex mutex;
  std::vector<std::unique_ptr<InputFile>> open;  // by Index::files position

  // The open file, checked once against its FileInfo when first opened.
  const InputFile& get(int file, const std::string& path, const FileInfo& info,
                       const std::string& tensor) {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = open.at(static_cast<size_t>(file));
    if (slot) return *slot;
    std::unique_ptr<InputFile> opened;
    try {
      opened = std::make_unique<InputFile>(path);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "fsdp: checkpoint data file '", path, "' holding tensor '", tensor,
                  "' cannot be opened: ", detail::error_cause(e));
    }
    const std::string problem = rank_file_problem(*opened, info);
    TORCH_CHECK(problem.empty(), "fsdp: checkpoint data file '", path, "' holding tensor '", tensor,
                "' ", problem);
    slot = std::move(opened);
    return *slot;
  }
};

namespace {

// Copies piece bytes [begin, end) (relative to the piece's first byte) into
// dst, reading whole checksum blocks and verifying each one. Edge blocks go
// through a bounce buffer; whole blocks are read straight into dst.
void read_piece_bytes(const InputFile& file, const TensorInfo& t, const PieceInfo& p, int64_t block_bytes,
                      int64_t begin, int64_t end, char* dst) {
  const int64_t elem = static_cast<int64_t>(c10::elementSize(t.dtype));
  const int64_t piece_bytes = p.numel() * elem;
  TORCH_INTERNAL_ASSERT(0 <= begin && begin <= end && end <= piece_bytes);
  if (begin == end) return;
  std::vector<char> bounce;
  for (int64_t k = begin / block_bytes; k * block_bytes < end; ++k) {
    const int64_t block_begin = k * block_bytes;
    const int64_t block_end = std::min(block_begin + block_bytes, piece_bytes);
    const bool whole = block_begin >= begin && block_end <= end;
    char* target = dst + (block_begin - begin);
    if (!whole) {
      bounce.resize(static_cast<size_t>(block_end - block_begin));
      target = bounce.data();
    }
    const int64_t file_begin = p.byte_offset + block_begin;
    const int64_t file_end = p.byte_offset + block_end;
    const int64_t elem_begin = p.flat_begin + block_begin / elem;
    const int64_t elem_end = p.flat_begin + (block_end + elem - 1) / elem;
    TORCH_CHECK(file.read_at(file_begin, target, block_end - block_begin), "fsdp: checkpoint data file '",
                file.path(), "' is truncated: tensor '", t.name, "' elements [", elem_begin, ", ",
                elem_end, ") need file bytes [", file_begin, ", ", file_end, ") but the file has ",
                file.size(), " bytes");
    TORCH_CHECK(xxh64(target, block_end - block_begin) == p.block_checksums.at(static_cast<size_t>(k)),
                "fsdp: checkpoint data file '", file.path(), "' is corrupted: tensor '", t.name, "' elements [",
                elem_begin, ", ", elem_end, ") (file bytes [", file_begin, ", ", file_end,
                ")) fail their xxh64 checksum");
    if (!whole) {
      const int64_t from = std::max(block_begin, begin);
      const int64_t to = std::min(block_end, end);
      std::memcpy(dst + (from - begin), bounce.data() + (from - block_begin), static_cast<size_t>(to - from));
    }
  }
}

}  // namespace

Reader Reader::open(const std::string& dir) {
  Reader reader;
  reader.dir_ = dir;
  reader.index_ = std::make_shared<const Index>(read_index(dir));
  reader.files_ = std::make_shared<Files>();
  reader.files_->open.resize(reader.index_->files.size());
  return reader;
}

std::vector<std::string> Reader::names() const {
  std::vector<std::string> names;
  for (const auto& t : index_->tensors) names.push_back(t.name);
  return names;
}

bool Reader::contains(const std::string& name) const { return index_->find(name) >= 0; }

const TensorInfo& Reader::tensor(const std::string& name) const {
  const int64_t i = index_->find(name);
  TORCH_CHECK(i >= 0, "fsdp: checkpoint '", dir_, "' has no tensor '", name, "' (it has ",
              index_->tensors.size(), " tensors; `fsdp-ckpt inspect ", dir_, "` lists them)");
  return index_->tensors[static_cast<size_t>(i)];
}

const std::vector<int64_t>& Reader::global_shape(const std::string& name) const { return tensor(name).shape; }
at::ScalarType Reader::dtype(const std::string& name) const { return tensor(name).dtype; }
int64_t Reader::numel(const std::string& name) const { return tensor(name).numel(); }
int64_t Reader::piece_count(const std::string& name) const {
  return static_cast<int64_t>(tensor(name).pieces.size());
}

int64_t Reader::step() const { return index_->step; }
const std::string& Reader::extras_json() const { return index_->extras_json; }
int Reader::saved_world_size() const { return index_->world_size; }
int Reader::format_version() const { return index_->format_version; }
int64_t Reader::file_count() const { return static_cast<int64_t>(index_->files.size()); }
int64_t Reader::checksum_block_bytes() const { return index_->checksum_block_bytes; }

std::string Reader::file_path(int file) const {
  return (fs::path(dir_) / index_->files.at(static_cast<size_t>(file)).name).string();
}

void Reader::read_into(const std::string& name, int64_t flat_begin, const at::Tensor& out) const {
  const TensorInfo& t = tensor(name);
  const int64_t numel = out.numel();
  TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() && out.scalar_type() == t.dtype,
              "fsdp: Reader::read_into('", name, "'): `out` must be a contiguous CPU tensor of dtype ",
              c10::toString(t.dtype), ", got ", out.toString(), out.is_contiguous() ? "" : " (non-contiguous)");
  TORCH_CHECK(flat_begin >= 0 && flat_begin + numel <= t.numel(), "fsdp: cannot read elements [", flat_begin,
              ", ", flat_begin + numel, ") of '", name, "': it has ", t.numel(), " elements (shape ",
              c10::IntArrayRef(t.shape), ")");
  const int64_t end = flat_begin + numel;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(t.dtype));
  char* dst = static_cast<char*>(out.data_ptr());
  // Pieces are sorted by flat_begin and tile the tensor: find the first one
  // that ends after flat_begin.
  auto it = std::upper_bound(t.pieces.begin(), t.pieces.end(), flat_begin,
                             [](int64_t v, const PieceInfo& p) { return v < p.flat_end; });
  for (; it != t.pieces.end() && it->flat_begin < end; ++it) {
    const PieceInfo& p = *it;
    const int64_t lo = std::max(flat_begin, p.flat_begin);
    const int64_t hi = std::min(end, p.flat_end);
    const InputFile& file = files_->get(p.file, file_path(p.file), index_->files.at(p.file), name);
    read_piece_bytes(file, t, p, index_->checksum_block_bytes, (lo - p.flat_begin) * elem,
                     (hi - p.flat_begin) * elem, dst + (lo - flat_begin) * elem);
  }
}

at::Tensor Reader::read(const std::string& name, int64_t flat_begin, int64_t numel) const {
  const TensorInfo& t = tensor(name);
  TORCH_CHECK(numel >= 0, "fsdp: cannot read a negative number of elements (", numel, ") of '", name, "'");
  at::Tensor out = at::empty({numel}, at::TensorOptions().dtype(t.dtype));
  read_into(name, flat_begin, out);
  return out;
}

at::Tensor Reader::read_full(const std::string& name) const {
  const TensorInfo& t = tensor(name);
  at::Tensor out = at::empty(t.shape, at::TensorOptions().dtype(t.dtype));
  read_into(name, 0, out);
  return out;
}

VerifyReport Reader::verify_all() const {
  VerifyReport report;
  std::vector<std::string> problems;
  // A damaged file is reported once here; its pieces are then skipped. A
  // missing one is reported below, per tensor.
  std::vector<bool> damaged(index_->files.size(), false);
  for (size_t f = 0; f < index_->files.size(); ++f) {
    const std::string path = file_path(static_cast<int>(f));
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    const std::string problem = rank_file_problem(InputFile(path), index_->files[f]);
    if (problem.empty()) continue;
    damaged[f] = true;
    problems.push_back(c10::str("checkpoint data file '", path, "' ", problem));
  }
  // Verify in chunks of whole blocks so memory stays bounded.
  const int64_t block = index_->checksum_block_bytes;
  const int64_t chunk = std::max<int64_t>(block, (64 << 20) / block * block);
  std::vector<char> buffer;
  for (const auto& t : index_->tensors) {
    ++report.tensors;
    const int64_t elem = static_cast<int64_t>(c10::elementSize(t.dtype));
    for (const auto& p : t.pieces) {
      ++report.pieces;
      if (damaged.at(static_cast<size_t>(p.file))) continue;
      try {
        const InputFile& file =
            files_->get(p.file, file_path(p.file), index_->files.at(p.file), t.name);
        const int64_t piece_bytes = p.numel() * elem;
        for (int64_t off = 0; off < piece_bytes; off += chunk) {
          const int64_t n = std::min(chunk, piece_bytes - off);
          buffer.resize(static_cast<size_t>(n));
          read_piece_bytes(file, t, p, block, off, off + n, buffer.data());
          report.bytes += n;
        }
      } catch (const std::exception& e) {
        problems.push_back(detail::error_cause(e));
      }
    }
  }
  if (!problems.empty()) {
    std::string message = c10::str("fsdp: checkpoint '", dir_, "' failed verification (", problems.size(),
                                   " problem", problems.size() == 1 ? "" : "s", "):");
    constexpr size_t kShown = 20;
    for (size_t i = 0; i < std::min(problems.size(), kShown); ++i) message += "\n  " + problems[i];
    if (problems.size() > kShown) message += "\n  ... and " + std::to_string(problems.size() - kShown) + " more";
    TORCH_CHECK(false, message);
  }
  return report;
}

}  // namespace fsdp::ckpt
