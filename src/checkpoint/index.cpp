#include "fsdp/checkpoint/index.h"

#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <fmt/format.h>

#include <filesystem>
#include <unordered_set>

#include "checkpoint/atomic_file.h"
#include "fsdp/checkpoint/checksum.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/error_message.h"

namespace fsdp::ckpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t TensorInfo::numel() const { return c10::multiply_integers(shape); }

std::string piece_key(const std::string& name, int64_t flat_begin) {
  return name + "@" + std::to_string(flat_begin);
}

std::string rank_file_name(int rank, int world_size) {
  return fmt::format("rank-{:05d}-of-{:05d}.safetensors", rank, world_size);
}

json Index::to_json() const {
  json j;
  j["format"] = kFormatName;
  j["format_version"] = format_version;
  j["world_size"] = world_size;
  j["step"] = step;
  j["extras"] = extras;
  j["checksum"] = {{"algorithm", "xxh64"}, {"seed", 0}, {"block_bytes", checksum_block_bytes}};
  j["files"] = json::array();
  for (const auto& f : files) j["files"].push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}});
  j["tensors"] = json::array();
  for (const auto& t : tensors) {
    json jt;
    jt["name"] = t.name;
    jt["shape"] = t.shape;
    jt["dtype"] = safetensors::dtype_name(t.dtype);
    jt["pieces"] = json::array();
    for (const auto& p : t.pieces) {
      json hashes = json::array();
      for (uint64_t h : p.block_checksums) hashes.push_back(checksum_to_hex(h));
      jt["pieces"].push_back({{"file", p.file},
                              {"key", p.key},
                              {"flat_begin", p.flat_begin},
                              {"flat_end", p.flat_end},
                              {"byte_offset", p.byte_offset},
                              {"block_xxh64", std::move(hashes)}});
    }
    j["tensors"].push_back(std::move(jt));
  }
  return j;
}

Index Index::from_json(const json& j, const std::string& source) {
  Index index;
  try {
    TORCH_CHECK(j.is_object(), "fsdp: ", source, " is not a JSON object");
    const std::string format = j.at("format").get<std::string>();
    TORCH_CHECK(format == kFormatName, "fsdp: ", source, " has format \"", format, "\", expected \"",
                kFormatName, "\"");
    index.format_version = j.at("format_version").get<int>();
    TORCH_CHECK(index.format_version == kFormatVersion, "fsdp: ", source, " has format_version ",
                index.format_version, "; this libfsdp reads version ", kFormatVersion,
                " (upgrade libfsdp to read newer checkpoints)");
    index.world_size = j.at("world_size").get<int>();
    index.step = j.at("step").get<int64_t>();
    index.extras = j.value("extras", json::object());
    const json& checksum = j.at("checksum");
    const std::string algorithm = checksum.at("algorithm").get<std::string>();
    TORCH_CHECK(algorithm == "xxh64", "fsdp: ", source, " uses checksum algorithm \"", algorithm,
                "\"; only xxh64 is supported");
    index.checksum_block_bytes = checksum.at("block_bytes").get<int64_t>();
    for (const auto& jf : j.at("files"))
      index.files.push_back({jf.at("name").get<std::string>(), jf.at("rank").get<int>(),
                             jf.at("bytes").get<int64_t>()});
    for (const auto& jt : j.at("tensors")) {
      TensorInfo t;
      t.name = jt.at("name").get<std::string>();
      t.shape = jt.at("shape").get<std::vector<int64_t>>();
      t.dtype = safetensors::dtype_from_name(jt.at("dtype").get<std::string>());
      for (const auto& jp : jt.at("pieces")) {
        PieceInfo p;
        p.file = jp.at("file").get<int>();
        p.key = jp.at("key").get<std::string>();
        p.flat_begin = jp.at("flat_begin").get<int64_t>();
        p.flat_end = jp.at("flat_end").get<int64_t>();
        p.byte_offset = jp.at("byte_offset").get<int64_t>();
        for (const auto& h : jp.at("block_xxh64"))
          p.block_checksums.push_back(
              checksum_from_hex(h.get<std::string>(), source + ", tensor '" + t.name + "'"));
        t.pieces.push_back(std::move(p));
      }
      index.tensors.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    TORCH_CHECK(false, "fsdp: ", source, " is malformed: ", error_message(e));
  }
  index.validate(source);
  return index;
}

void Index::validate(const std::string& source) const {
  TORCH_CHECK(world_size >= 1, "fsdp: ", source, ": world_size must be >= 1, got ", world_size);
  TORCH_CHECK(checksum_block_bytes > 0, "fsdp: ", source, ": checksum block_bytes must be positive, got ",
              checksum_block_bytes);
  std::unordered_set<std::string> names;
  for (const auto& f : files) {
    TORCH_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != "..", "fsdp: ", source,
                ": file name \"", f.name, "\" must be a plain name inside the checkpoint directory");
  }
  for (const auto& t : tensors) {
    TORCH_CHECK(names.insert(t.name).second, "fsdp: ", source, ": tensor '", t.name, "' is listed twice");
    for (int64_t d : t.shape)
      TORCH_CHECK(d >= 0, "fsdp: ", source, ": tensor '", t.name, "' has a negative dimension");
    const int64_t numel = t.numel();
    const int64_t elem = static_cast<int64_t>(c10::elementSize(t.dtype));
    int64_t covered = 0;
    for (const auto& p : t.pieces) {
      TORCH_CHECK(p.file >= 0 && p.file < static_cast<int>(files.size()), "fsdp: ", source, ": tensor '",
                  t.name, "' has a piece in file #", p.file, " but only ", files.size(),
                  " files are listed");
      TORCH_CHECK(p.flat_begin < p.flat_end, "fsdp: ", source, ": tensor '", t.name,
                  "' has an empty or reversed piece [", p.flat_begin, ", ", p.flat_end, ")");
      TORCH_CHECK(p.flat_begin == covered, "fsdp: ", source, ": tensor '", t.name, "' pieces ",
                  p.flat_begin < covered ? "overlap" : "leave a gap", " at element ",
                  std::min(p.flat_begin, covered));
      TORCH_CHECK(p.byte_offset >= 0, "fsdp: ", source, ": tensor '", t.name, "' has a negative byte_offset");
      const int64_t nbytes = p.numel() * elem;
      const int64_t blocks = (nbytes + checksum_block_bytes - 1) / checksum_block_bytes;
      TORCH_CHECK(static_cast<int64_t>(p.block_checksums.size()) == blocks, "fsdp: ", source, ": tensor '",
                  t.name, "' piece [", p.flat_begin, ", ", p.flat_end, ") has ",
                  p.block_checksums.size(), " block checksums, expected ", blocks);
      covered = p.flat_end;
    }
    TORCH_CHECK(covered == numel, "fsdp: ", source, ": tensor '", t.name, "' has ", numel,
                " elements but its pieces cover only [0, ", covered, ")");
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
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    TORCH_CHECK(false, "fsdp: '", path, "' is corrupted (invalid JSON): ", error_message(e));
  }
  return Index::from_json(j, "'" + path + "'");
}

void write_index(const std::string& dir, const Index& index) {
  index.validate("index for '" + dir + "'");
  write_file_atomic((fs::path(dir) / kIndexFileName).string(), index.to_json().dump(1) + "\n",
                    /*overwrite=*/false);
}

}  // namespace fsdp::ckpt
