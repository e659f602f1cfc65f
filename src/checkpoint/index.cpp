#include "checkpoint/index.h"

#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <cstdio>

#include <filesystem>
#include <set>
#include <unordered_set>

#include "checkpoint/atomic_file.h"
#include "checkpoint/checksum.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/error_message.h"
#include "json/json_io.h"

namespace fsdp::ckpt {

namespace fs = std::filesystem;

int64_t TensorInfo::numel() const { return c10::multiply_integers(shape); }

std::string piece_key(const std::string& name, int64_t flat_begin) {
  return name + "@" + std::to_string(flat_begin);
}

std::string rank_file_name(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof(name), "rank-%05d-of-%05d.safetensors", rank, world_size);
  return name;
}

std::string optimizer_entry_name(const std::string& param, const std::string& field) {
  return "optim/" + param + "/" + field;
}

std::optional<std::string> optimizer_entry_param(const std::string& tensor_name) {
  const std::string prefix = "optim/";
  const size_t last_slash = tensor_name.rfind('/');
  if (tensor_name.rfind(prefix, 0) != 0 || last_slash <= prefix.size()) return std::nullopt;
  return tensor_name.substr(prefix.size(), last_slash - prefix.size());
}

std::vector<std::string> params_with_optimizer_entries(const std::vector<TensorInfo>& tensors) {
  std::set<std::string> params;
  for (const auto& t : tensors) {
    if (auto param = optimizer_entry_param(t.name)) params.insert(*param);
  }
  return {params.begin(), params.end()};
}

std::string Index::to_json() const {
  json::Writer w(/*indent=*/1);
  w.begin_object();
  w.member("format", kFormatName).member("format_version", format_version);
  w.member("world_size", world_size).member("step", step);
  w.key("extras").raw(extras_json.empty() ? "{}" : extras_json);
  if (params_with_optimizer_state) {
    w.key("params_with_optimizer_state").begin_array();
    for (const auto& param : *params_with_optimizer_state) w.value(param);
    w.end_array();
  }
  w.key("checksum").begin_object();
  w.member("algorithm", "xxh64").member("seed", 0).member("block_bytes", checksum_block_bytes);
  w.end_object();
  w.key("files").begin_array();
  for (const auto& f : files) {
    w.begin_object().member("name", f.name).member("rank", f.rank).member("bytes", f.bytes);
    if (f.header_checksum) w.member("header_xxh64", checksum_to_hex(*f.header_checksum));
    w.end_object();
  }
  w.end_array();
  w.key("tensors").begin_array();
  for (const auto& t : tensors) {
    w.begin_object().member("name", t.name);
    w.key("shape").array(t.shape);
    w.member("dtype", safetensors::dtype_name(t.dtype));
    w.key("pieces").begin_array();
    for (const auto& p : t.pieces) {
      w.begin_object().member("file", p.file).member("key", p.key);
      w.member("flat_begin", p.flat_begin).member("flat_end", p.flat_end).member("byte_offset", p.byte_offset);
      w.key("block_xxh64").begin_array();
      for (uint64_t h : p.block_checksums) w.value(checksum_to_hex(h));
      w.end_array().end_object();
    }
    w.end_array().end_object();
  }
  w.end_array().end_object();
  return w.text();
}

namespace {

TensorInfo tensor_from_json(const json::Value& jt, const std::string& source) {
  TensorInfo t;
  t.name = json::string_field(jt, "name", source + ", a tensor");
  const std::string where = source + ", tensor '" + t.name + "'";
  t.shape = json::int64_array_field(jt, "shape", where);
  t.dtype = safetensors::dtype_from_name(json::string_field(jt, "dtype", where));
  const json::Value& pieces = json::array_field(jt, "pieces", where);
  for (const auto& jp : pieces.GetArray()) {
    PieceInfo p;
    p.file = json::int_field(jp, "file", where + ", a piece");
    p.key = json::string_field(jp, "key", where + ", a piece");
    const std::string piece = where + ", piece '" + p.key + "'";
    p.flat_begin = json::int64_field(jp, "flat_begin", piece);
    p.flat_end = json::int64_field(jp, "flat_end", piece);
    p.byte_offset = json::int64_field(jp, "byte_offset", piece);
    for (const std::string& h : json::string_array_field(jp, "block_xxh64", piece))
      p.block_checksums.push_back(checksum_from_hex(h, where));
    t.pieces.push_back(std::move(p));
  }
  return t;
}

FileInfo file_from_json(const json::Value& jf, const std::string& where) {
  FileInfo f{json::string_field(jf, "name", where), json::int_field(jf, "rank", where),
             json::int64_field(jf, "bytes", where), std::nullopt};
  if (json::has(jf, "header_xxh64")) {
    f.header_checksum = checksum_from_hex(json::string_field(jf, "header_xxh64", where), where);
  }
  return f;
}

}  // namespace

Index Index::from_json(const std::string& text, const std::string& source) {
  const json::Document j = json::parse(text, source);
  json::require_object(j, source);
  Index index;
  const std::string format = json::string_field(j, "format", source);
  TORCH_CHECK(format == kFormatName, "fsdp: ", source, " has format \"", format, "\", expected \"",
              kFormatName, "\"");
  index.format_version = json::int_field(j, "format_version", source);
  TORCH_CHECK(index.format_version == kFormatVersion, "fsdp: ", source, " has format_version ",
              index.format_version, "; this libfsdp reads version ", kFormatVersion,
              " (upgrade libfsdp to read newer checkpoints)");
  index.world_size = json::int_field(j, "world_size", source);
  index.step = json::int64_field(j, "step", source);
  if (json::has(j, "extras")) {
    const json::Value& extras = j["extras"];
    TORCH_CHECK(extras.IsObject(), "fsdp: ", source, ": field 'extras' is not an object (it is ",
                json::kind_name(extras), ")");
    index.extras_json = json::to_text(extras);
  }
  if (json::has(j, "params_with_optimizer_state")) {
    index.params_with_optimizer_state =
        json::string_array_field(j, "params_with_optimizer_state", source);
  }
  const json::Value& checksum = json::field(j, "checksum", source);
  const std::string algorithm = json::string_field(checksum, "algorithm", source + ", checksum");
  TORCH_CHECK(algorithm == "xxh64", "fsdp: ", source, " uses checksum algorithm \"", algorithm,
              "\"; only xxh64 is supported");
  index.checksum_block_bytes = json::int64_field(checksum, "block_bytes", source + ", checksum");
  for (const auto& jf : json::array_field(j, "files", source).GetArray())
    index.files.push_back(file_from_json(jf, source + ", a file"));
  for (const auto& jt : json::array_field(j, "tensors", source).GetArray())
    index.tensors.push_back(tensor_from_json(jt, source));
  index.validate(source);
  return index;
}

namespace {

// Shapes and offsets come from a file that may be corrupt or hostile: every
// product is checked, so a bad index is an error naming it, never a wrapped
// size that passes the checks below.
int64_t checked_product(int64_t a, int64_t b, const std::string& what) {
  int64_t product = 0;
  TORCH_CHECK(!__builtin_mul_overflow(a, b, &product), "fsdp: ", what, " overflows int64 (", a,
              " x ", b, "); the index is corrupt");
  return product;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The element count of `t`'s shape, checked.
int64_t checked_numel(const TensorInfo& t, const std::string& source) {
  const std::string what = source + ": tensor '" + t.name + "' of shape " + shape_text(t.shape);
  int64_t numel = 1;
  for (int64_t d : t.shape) {
    TORCH_CHECK(d >= 0, "fsdp: ", what, " has a negative dimension");
    numel = checked_product(numel, d, what + ": its element count");
  }
  return numel;
}

// Pieces sorted, in range, tiling [0, numel) exactly, with one checksum per
// block of each piece's bytes.
void validate_pieces(const TensorInfo& t, int64_t numel, size_t file_count,
                     int64_t block_bytes, const std::string& source) {
  const std::string what = source + ": tensor '" + t.name + "'";
  const int64_t elem = static_cast<int64_t>(c10::elementSize(t.dtype));
  checked_product(numel, elem, what + ": its byte size");
  int64_t covered = 0;
  for (const auto& p : t.pieces) {
    TORCH_CHECK(p.file >= 0 && p.file < static_cast<int>(file_count), "fsdp: ", what,
                " has a piece in file #", p.file, " but only ", file_count, " files are listed");
    TORCH_CHECK(p.flat_begin < p.flat_end, "fsdp: ", what, " has an empty or reversed piece [",
                p.flat_begin, ", ", p.flat_end, ")");
    TORCH_CHECK(p.flat_begin == covered, "fsdp: ", what, " pieces ",
                p.flat_begin < covered ? "overlap" : "leave a gap", " at element ",
                std::min(p.flat_begin, covered));
    TORCH_CHECK(p.flat_end <= numel, "fsdp: ", what, " has ", numel, " elements but a piece ends at ",
                p.flat_end);
    TORCH_CHECK(p.byte_offset >= 0, "fsdp: ", what, " has a negative byte_offset");
    const int64_t nbytes = p.numel() * elem;  // <= numel * elem, checked above
    const int64_t blocks = (nbytes + block_bytes - 1) / block_bytes;
    TORCH_CHECK(static_cast<int64_t>(p.block_checksums.size()) == blocks, "fsdp: ", what,
                " piece [", p.flat_begin, ", ", p.flat_end, ") has ", p.block_checksums.size(),
                " block checksums, expected ", blocks);
    covered = p.flat_end;
  }
  TORCH_CHECK(covered == numel, "fsdp: ", what, " has ", numel,
              " elements but its pieces cover only [0, ", covered, ")");
}

}  // namespace

void Index::validate(const std::string& source) const {
  TORCH_CHECK(world_size >= 1, "fsdp: ", source, ": world_size must be >= 1, got ", world_size);
  TORCH_CHECK(step >= 0, "fsdp: ", source, ": step must be >= 0, got ", step,
              "; the index is corrupt");
  TORCH_CHECK(checksum_block_bytes > 0, "fsdp: ", source, ": checksum block_bytes must be positive, got ",
              checksum_block_bytes);
  for (const auto& f : files) {
    TORCH_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != "..", "fsdp: ", source,
                ": file name \"", f.name, "\" must be a plain name inside the checkpoint directory");
    TORCH_CHECK(f.bytes >= 0, "fsdp: ", source, ": file \"", f.name, "\" has a negative size ",
                f.bytes);
  }
  std::unordered_set<std::string> names;
  for (const auto& t : tensors) {
    TORCH_CHECK(names.insert(t.name).second, "fsdp: ", source, ": tensor '", t.name, "' is listed twice");
    validate_pieces(t, checked_numel(t, source), files.size(), checksum_block_bytes, source);
  }
}

int64_t Index::find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

Index read_index(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    // An interrupted save leaves "<dir>.partial-<id>" next to where the
    // checkpoint would have been.
    std::string partial;
    const fs::path target(dir);
    const std::string stem = target.filename().string() + ".partial-";
    fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    if (fs::is_directory(parent, ec))
      for (const auto& entry : fs::directory_iterator(parent, ec))
        if (entry.path().filename().string().rfind(stem, 0) == 0) partial = entry.path().string();
    TORCH_CHECK(false, "fsdp: checkpoint directory '", dir, "' does not exist",
                partial.empty() ? std::string()
                                : "; found '" + partial +
                                      "', left by a save that did not complete (was a rank killed?)");
  }
  TORCH_CHECK(fs::is_directory(dir, ec), "fsdp: '", dir, "' is not a checkpoint directory (it is a file)");
  const std::string path = (fs::path(dir) / kIndexFileName).string();
  TORCH_CHECK(fs::exists(path, ec), "fsdp: '", dir, "' has no ", kIndexFileName,
              ": the save did not complete (was a rank killed?), or this is not a libfsdp checkpoint");
  return Index::from_json(read_file(path), "checkpoint index '" + path + "'");
}

void write_index(const std::string& dir, const Index& index) {
  index.validate("index for '" + dir + "'");
  write_file_atomic((fs::path(dir) / kIndexFileName).string(), index.to_json() + "\n",
                    /*overwrite=*/false);
}

}  // namespace fsdp::ckpt
