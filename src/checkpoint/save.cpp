#include "fsdp/checkpoint/save.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "checkpoint/atomic_file.h"
#include "checkpoint/checksum.h"
#include "checkpoint/error_cause.h"
#include "checkpoint/index.h"
#include "checkpoint/rank_file.h"
#include "checkpoint/save_hook.h"
#include "checkpoint/staging.h"
#include "checkpoint/verdict.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/comm/process_group.h"
#include "fsdp/file_tree.h"
#include "json/json_io.h"

// [Note: checkpoint commit protocol]
// A save is three rounds in which every rank sends every other its Verdict
// (verdict.h: ok, the error, the result), so that every rank learns every
// outcome and all of them return or throw together:
//   1. Rank 0 checks the target (parent exists and is writable; an existing
//      target needs overwrite and must itself be a checkpoint or empty) and
//      creates the staging directory "<dir>.partial-<id>". Its verdict and
//      the staging path go to every rank. Nothing is written on failure.
//   2. Every rank writes its pieces to "<staging>/rank-RRRRR-of-WWWWW.safetensors",
//      fsyncs it, and sends back either its piece records (offsets, block
//      checksums) or its error.
//   3. Rank 0, if every rank succeeded, checks the pieces tile every tensor
//      exactly, writes index.json (temp + fsync + rename), fsyncs the staging
//      directory, and moves it to `dir` (renameat2 RENAME_EXCHANGE when
//      replacing, so `dir` is always either the old or the new checkpoint),
//      then removes the old one. Its verdict goes to every rank.
// A crash anywhere before the final rename leaves `dir` untouched and a
// staging directory without index.json, which Reader::open refuses by name.
// The data files are durable before the index names them, and the index is
// durable before the directory is renamed, so a checkpoint that is visible
// at `dir` is always complete.

namespace fsdp::ckpt {

namespace fs = std::filesystem;

namespace {

// Checks this rank's pieces on their own, before writing anything.
void check_local_pieces(const std::vector<TensorPiece>& pieces) {
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> ranges;
  for (const auto& p : pieces) {
    TORCH_CHECK(!p.name.empty(), "fsdp: a piece has an empty tensor name");
    for (int64_t d : p.global_shape)
      TORCH_CHECK(d >= 0, "fsdp: tensor '", p.name, "' has a negative dimension in global_shape");
    safetensors::dtype_name(p.dtype);  // throws for dtypes safetensors cannot store
    TORCH_CHECK(p.data.defined(), "fsdp: piece of '", p.name, "' at element ", p.flat_begin, " has no data");
    TORCH_CHECK(p.data.scalar_type() == p.dtype, "fsdp: piece of '", p.name, "' at element ", p.flat_begin,
                " holds ", c10::toString(p.data.scalar_type()), " data but declares dtype ",
                c10::toString(p.dtype));
    const int64_t numel = c10::multiply_integers(p.global_shape);
    const int64_t end = p.flat_begin + p.data.numel();
    TORCH_CHECK(p.flat_begin >= 0 && end <= numel, "fsdp: piece of '", p.name, "' covers elements [",
                p.flat_begin, ", ", end, ") but the tensor has ", numel, " elements");
    if (end > p.flat_begin) ranges[p.name].emplace_back(p.flat_begin, end);
  }
  for (auto& [name, rs] : ranges) {
    std::sort(rs.begin(), rs.end());
    for (size_t i = 1; i < rs.size(); ++i)
      TORCH_CHECK(rs[i].first >= rs[i - 1].second, "fsdp: this rank passes overlapping pieces of '", name,
                  "': [", rs[i - 1].first, ", ", rs[i - 1].second, ") and [", rs[i].first, ", ",
                  rs[i].second, ")");
  }
}

// The work of round 2 on one rank: writes its pieces to its file and returns
// the JSON record of what it wrote.
std::string write_pieces(const std::string& staging, int rank, int world_size,
                         const std::vector<TensorPiece>& pieces, const SaveOptions& options) {
  check_local_pieces(pieces);
  const std::string file_name = rank_file_name(rank, world_size);
  const std::string path = (fs::path(staging) / file_name).string();
  std::vector<detail::PieceSpec> specs;
  std::vector<const TensorPiece*> written;
  json::Writer record;
  record.begin_object().key("declared").begin_array();
  for (const auto& p : pieces) {
    record.begin_object().member("name", p.name);
    record.key("shape").array(p.global_shape);
    record.member("dtype", safetensors::dtype_name(p.dtype)).end_object();
    if (p.data.numel() == 0) continue;
    specs.push_back({p.name, p.dtype, p.flat_begin, p.data.numel()});
    written.push_back(&p);
  }
  record.end_array();
  detail::run_save_hook(rank, testing::SavePhase::kBeforeDataFile, path);
  record.key("pieces").begin_array();
  if (specs.empty()) {
    // A rank with nothing to save writes no file.
    record.end_array().member("bytes", int64_t{0}).key("file").null();
  } else {
    detail::RankFileWriter writer(path, rank, world_size, specs, options.checksum_block_bytes,
                                  options.bypass_page_cache ? PageCache::kBypass : PageCache::kUse);
    for (const TensorPiece* p : written) writer.write_next(p->data.reshape({-1}));
    const int64_t bytes = writer.finish();
    for (size_t i = 0; i < specs.size(); ++i) {
      const PieceInfo& info = writer.pieces()[i];
      record.begin_object().member("name", specs[i].name).member("key", info.key);
      record.member("flat_begin", info.flat_begin).member("flat_end", info.flat_end);
      record.member("byte_offset", info.byte_offset);
      record.key("hashes").array(info.block_checksums);
      record.end_object();
    }
    record.end_array().member("bytes", bytes).member("file", file_name);
    record.member("header_xxh64", checksum_to_hex(writer.header_checksum()));
  }
  detail::run_save_hook(rank, testing::SavePhase::kAfterDataFile, path);
  return record.end_object().text();
}

// Where a rank's record is named in errors.
std::string record_source(size_t rank) { return "the save record of rank " + std::to_string(rank); }

// The tensors the ranks declared, in the order first declared, with no
// pieces yet. Every rank that declares a tensor must agree on its shape and
// dtype. `position` maps each name to its place in the result.
std::vector<TensorInfo> declared_tensors(const std::vector<json::Document>& records,
                                         std::map<std::string, size_t>* position) {
  std::vector<TensorInfo> tensors;
  std::map<std::string, int> declared_by;
  for (size_t rank = 0; rank < records.size(); ++rank) {
    const std::string source = record_source(rank);
    for (const auto& d : json::array_field(records[rank], "declared", source).GetArray()) {
      const std::string name = json::string_field(d, "name", source);
      const auto shape = json::int64_array_field(d, "shape", source);
      const auto dtype = safetensors::dtype_from_name(json::string_field(d, "dtype", source));
      auto it = position->find(name);
      if (it == position->end()) {
        (*position)[name] = tensors.size();
        declared_by[name] = static_cast<int>(rank);
        tensors.push_back(TensorInfo{name, shape, dtype, {}});
        continue;
      }
      const TensorInfo& t = tensors[it->second];
      TORCH_CHECK(t.shape == shape && t.dtype == dtype, "fsdp: ranks disagree about tensor '", name,
                  "': rank ", declared_by[name], " says shape ", c10::IntArrayRef(t.shape), " ",
                  c10::toString(t.dtype), ", rank ", rank, " says shape ", c10::IntArrayRef(shape), " ",
                  c10::toString(dtype));
    }
  }
  return tensors;
}

// Adds each rank's file, and the pieces it holds to their tensors.
void add_rank_files(const std::vector<json::Document>& records, const std::map<std::string, size_t>& position,
                    Index* index) {
  for (size_t rank = 0; rank < records.size(); ++rank) {
    const json::Document& r = records[rank];
    const std::string source = record_source(rank);
    if (json::field(r, "file", source).IsNull()) continue;  // the rank had nothing to save
    const int file_index = static_cast<int>(index->files.size());
    index->files.push_back(
        {json::string_field(r, "file", source), static_cast<int>(rank), json::int64_field(r, "bytes", source),
         checksum_from_hex(json::string_field(r, "header_xxh64", source), source)});
    for (const auto& p : json::array_field(r, "pieces", source).GetArray()) {
      PieceInfo info;
      info.file = file_index;
      info.key = json::string_field(p, "key", source);
      info.flat_begin = json::int64_field(p, "flat_begin", source);
      info.flat_end = json::int64_field(p, "flat_end", source);
      info.byte_offset = json::int64_field(p, "byte_offset", source);
      info.block_checksums = json::uint64_array_field(p, "hashes", source);
      index->tensors[position.at(json::string_field(p, "name", source))].pieces.push_back(std::move(info));
    }
  }
}

// Sorts each tensor's pieces and checks they tile it exactly, naming the
// ranks when not.
void check_tiling(const std::vector<FileInfo>& files, std::vector<TensorInfo>* tensors) {
  for (auto& t : *tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const PieceInfo& a, const PieceInfo& b) { return a.flat_begin < b.flat_begin; });
    int64_t covered = 0;
    int covered_by = -1;
    for (const auto& p : t.pieces) {
      const int rank = files[p.file].rank;
      TORCH_CHECK(p.flat_begin >= covered, "fsdp: ranks ", covered_by, " and ", rank, " both hold elements [",
                  p.flat_begin, ", ", std::min(covered, p.flat_end), ") of '", t.name,
                  "' (a replicated tensor must be passed by one rank only)");
      TORCH_CHECK(p.flat_begin == covered, "fsdp: no rank holds elements [", covered, ", ", p.flat_begin,
                  ") of '", t.name, "'");
      covered = p.flat_end;
      covered_by = rank;
    }
    TORCH_CHECK(covered == t.numel(), "fsdp: no rank holds elements [", covered, ", ", t.numel(), ") of '",
                t.name, "' (shape ", c10::IntArrayRef(t.shape), ")");
  }
}

// SaveOptions::extras_json checked to be one JSON object, as compact text.
std::string extras_text(const std::string& extras_json) {
  if (extras_json.empty()) return "{}";
  json::Document extras;
  const std::string error = json::parse_error(extras_json, &extras);
  TORCH_CHECK(error.empty() && extras.IsObject(),
              "fsdp: SaveOptions::extras_json must be the text of a JSON object, e.g. {\"data_position\": 123}; "
              "got ", error.empty() ? json::kind_name(extras) : "invalid JSON (" + error + ")", ": ",
              extras_json.substr(0, 200));
  return json::to_text(extras);
}

// Part of round 3 on rank 0: builds the index from every rank's record.
Index build_index(const std::vector<json::Document>& records, const SaveOptions& options) {
  Index index;
  index.world_size = static_cast<int>(records.size());
  index.step = options.step;
  index.extras_json = extras_text(options.extras_json);
  index.checksum_block_bytes = options.checksum_block_bytes;
  std::map<std::string, size_t> position;
  index.tensors = declared_tensors(records, &position);
  index.params_with_optimizer_state = params_with_optimizer_entries(index.tensors);
  add_rank_files(records, position, &index);
  check_tiling(index.files, &index.tensors);
  return index;
}

void check_save_options(const SaveOptions& options) {
  TORCH_CHECK(options.checksum_block_bytes > 0,
              "fsdp: SaveOptions::checksum_block_bytes must be positive, got ", options.checksum_block_bytes);
  extras_text(options.extras_json);
}

// Round 1 on rank 0: checks the target and creates the staging directory.
// The result is the staging path.
detail::Verdict prepare_target(const std::string& dir, bool overwrite) {
  try {
    detail::check_target(dir, overwrite);
    const std::string staging = detail::staging_path(dir, detail::new_staging_id());
    detail::create_staging(staging);
    return detail::Verdict::success(staging);
  } catch (const std::exception& e) {
    return detail::Verdict::failure(detail::error_cause(e));
  }
}

// Round 2 on every rank: writes and fsyncs its own file. The result is the
// record of what it wrote (write_pieces).
detail::Verdict write_rank_file(const std::string& staging, int rank, int world_size,
                                const std::vector<TensorPiece>& pieces,
                                const SaveOptions& options) {
  try {
    return detail::Verdict::success(write_pieces(staging, rank, world_size, pieces, options));
  } catch (const std::exception& e) {
    return detail::Verdict::failure(detail::error_cause(e));
  }
}

// "N of W ranks failed to write their data:" and each failure, or "" if none.
std::string write_failures(const std::vector<detail::Verdict>& written) {
  std::string lines;
  int failed = 0;
  for (size_t rank = 0; rank < written.size(); ++rank) {
    if (written[rank].ok) continue;
    ++failed;
    lines += "\n  rank " + std::to_string(rank) + ": " + written[rank].message;
  }
  if (failed == 0) return "";
  return std::to_string(failed) + " of " + std::to_string(written.size()) + " ranks failed to write their data:" +
         lines;
}

// Round 3 on rank 0: if every rank wrote its file, writes the index and
// moves the checkpoint into place; otherwise removes the staging directory.
detail::Verdict commit_checkpoint(const std::string& staging, const std::string& dir,
                                  const std::vector<detail::Verdict>& written, const SaveOptions& options) {
  const std::string failures = write_failures(written);
  if (!failures.empty()) {
    remove_tree(staging);
    return detail::Verdict::failure(failures);
  }
  try {
    std::vector<json::Document> records;
    for (size_t rank = 0; rank < written.size(); ++rank)
      records.push_back(json::parse(written[rank].result, record_source(rank)));
    Index index = build_index(records, options);
    detail::run_save_hook(0, testing::SavePhase::kBeforeIndex, staging);
    detail::publish_checkpoint(staging, index, dir, options.overwrite);
    return detail::Verdict::success();
  } catch (const std::exception& e) {
    remove_tree(staging);
    return detail::Verdict::failure("rank 0 could not complete the checkpoint: " + detail::error_cause(e));
  }
}

// Every rank's verdict, with a failure of the exchange itself (a dead or
// hung rank) turned into a save error.
std::vector<detail::Verdict> exchange(ProcessGroup& group, const std::string& dir, const char* stage,
                                      const detail::Verdict& mine) {
  try {
    return detail::all_gather_verdicts(group, mine);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "fsdp: checkpoint save to '", dir, "' failed ", stage,
                ", when the ranks exchanged results: ", detail::error_cause(e),
                " (was a rank killed? any previous checkpoint at '", dir,
                "' is untouched; the incomplete save may be left in '", dir, ".partial-*')");
  }
}

}  // namespace

void save(ProcessGroup& group, const std::string& dir, const std::vector<TensorPiece>& my_pieces,
          const SaveOptions& options) {
  check_save_options(options);
  const int rank = group.rank();
  const detail::Verdict nothing = detail::Verdict::success();  // what ranks other than 0 send

  const detail::Verdict prepared = exchange(group, dir, "while preparing the target",
                                            rank == 0 ? prepare_target(dir, options.overwrite) : nothing)
                                       .at(0);
  TORCH_CHECK(prepared.ok, "fsdp: checkpoint save to '", dir, "' failed before writing anything: ",
              prepared.message);
  const std::string staging = prepared.result;

  const std::vector<detail::Verdict> written =
      exchange(group, dir, "while writing data files",
               write_rank_file(staging, rank, group.size(), my_pieces, options));

  const detail::Verdict committed =
      exchange(group, dir, "while writing the index",
               rank == 0 ? commit_checkpoint(staging, dir, written, options) : nothing)
          .at(0);
  TORCH_CHECK(committed.ok, "fsdp: checkpoint save to '", dir,
              "' failed (any previous checkpoint there is untouched): ", committed.message);
}

void save_local(const std::string& dir, const std::vector<std::vector<TensorPiece>>& pieces_by_rank,
                const SaveOptions& options) {
  const int world_size = static_cast<int>(pieces_by_rank.size());
  TORCH_CHECK(world_size >= 1, "fsdp: save_local needs the pieces of at least one rank");
  check_save_options(options);
  // The three rounds of save(), each rank's step run in turn.
  const detail::Verdict prepared = prepare_target(dir, options.overwrite);
  TORCH_CHECK(prepared.ok, "fsdp: checkpoint save to '", dir, "' failed before writing anything: ",
              prepared.message);
  const std::string staging = prepared.result;
  std::vector<detail::Verdict> written;
  for (int rank = 0; rank < world_size; ++rank) {
    written.push_back(write_rank_file(staging, rank, world_size, pieces_by_rank[rank], options));
  }
  const detail::Verdict committed = commit_checkpoint(staging, dir, written, options);
  TORCH_CHECK(committed.ok, "fsdp: checkpoint save to '", dir,
              "' failed (any previous checkpoint there is untouched): ", committed.message);
}

}  // namespace fsdp::ckpt
