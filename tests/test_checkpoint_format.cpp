// The checkpoint format's parts: the files written (with and without the
// page cache), safetensors files and the index (JSON round trip and
// validation). Reading and saving whole checkpoints in one process is in
// test_checkpoint_read_write.cpp.

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <c10/util/accumulate.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <rapidjson/document.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <random>
#include <vector>

#include "checkpoint/atomic_file.h"
#include "checkpoint/index.h"
#include "fsdp/checkpoint/safetensors.h"
#include "fsdp/file_tree.h"
#include "harness/assertions.h"
#include "harness/sample_tensors.h"
#include "harness/temp_dir.h"

namespace fs = std::filesystem;
using fsdp::testing::make_tensor;

namespace {

// Each file's directories carry its own prefix, to tell leftovers apart.
class TempDir : public fsdp::testing::TempDir {
 public:
  TempDir() : fsdp::testing::TempDir("fsdp-ckpt-test") {}
};

std::vector<char> random_bytes(int64_t n) {
  std::mt19937 gen(7);
  std::vector<char> bytes(static_cast<size_t>(n));
  for (char& b : bytes) b = static_cast<char>(gen());
  return bytes;
}

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// How many of the file's pages are in the page cache (mincore(2)).
int64_t cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  const auto size = static_cast<size_t>(fs::file_size(path));
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  TORCH_CHECK(map != MAP_FAILED, "cannot map ", path);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  TORCH_CHECK(::mincore(map, size, resident.data()) == 0, "mincore failed on ", path);
  ::munmap(map, size);
  int64_t cached = 0;
  for (unsigned char r : resident) cached += r & 1;
  return cached;
}

// Whether files in `dir` can be written around the page cache: O_DIRECT is
// taken, and the filesystem is not tmpfs, which lives in the page cache
// (newer kernels take O_DIRECT there and change nothing).
bool page_cache_can_be_bypassed(const std::string& dir) {
  struct statfs fs_info {};
  if (::statfs(dir.c_str(), &fs_info) != 0 || fs_info.f_type == TMPFS_MAGIC) return false;
  const std::string probe = dir + "/o-direct-probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

}  // namespace

// Bytes written around the page cache come back the same, at the exact
// length, across the 8 MiB staging buffer's edges, with a sync() before the
// end; and they are not left in the page cache where it can be bypassed.
// On tmpfs (/dev/shm) the same bytes go through the cache.
TEST(OutputFile, BypassingThePageCacheWritesTheSameBytes) {
  TempDir tmp;
  const int64_t mib = int64_t{1} << 20;
  const std::vector<char> bytes = random_bytes(17 * mib + 12345);
  const std::vector<int64_t> chunks = {1, 4095, 8 * mib - 7, 3 * mib, 6 * mib + 11};
  std::vector<std::string> dirs = {tmp.path()};
  if (fs::is_directory("/dev/shm"))
    dirs.push_back(fs::path("/dev/shm") / fs::path(tmp.path()).filename());
  for (const std::string& dir : dirs) {
    fs::create_directories(dir);
    for (auto mode : {fsdp::ckpt::PageCache::kUse, fsdp::ckpt::PageCache::kBypass}) {
      const std::string path = dir + (mode == fsdp::ckpt::PageCache::kUse ? "/cached" : "/direct");
      fsdp::ckpt::OutputFile out(path, /*truncate_existing=*/false, mode);
      int64_t at = 0;
      for (int64_t chunk : chunks) {
        out.write_all(bytes.data() + at, chunk);
        at += chunk;
        if (at == 1) out.sync();  // a padded 1-byte tail, then more bytes after it
      }
      out.write_all(bytes.data() + at, static_cast<int64_t>(bytes.size()) - at);
      EXPECT_EQ(out.offset(), static_cast<int64_t>(bytes.size()));
      out.sync();
      out.close();
    }
    if (page_cache_can_be_bypassed(dir)) {
      // Before reading them back, which caches them. The file has 4356 pages.
      EXPECT_LT(cached_pages(dir + "/direct"), 16) << dir;
      EXPECT_GT(cached_pages(dir + "/cached"), 1000) << dir;
    } else {
      std::printf("%s cannot be written around the page cache\n", dir.c_str());
    }
    EXPECT_EQ(file_bytes(dir + "/cached"), bytes) << dir;
    EXPECT_EQ(file_bytes(dir + "/direct"), bytes) << dir;
  }
  if (dirs.size() > 1) fsdp::remove_tree_or_throw(dirs[1]);
}

TEST(Safetensors, RoundTripsEveryDtypeAndScalars) {
  TempDir tmp;
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"bf16", make_tensor({3, 5}, at::kBFloat16, 1)}, {"f16", make_tensor({7}, at::kHalf, 2)},
      {"f32", make_tensor({2, 3, 4}, at::kFloat, 3)},  {"f64", make_tensor({6}, at::kDouble, 4)},
      {"i64", make_tensor({9}, at::kLong, 5)},         {"i32", make_tensor({2, 2}, at::kInt, 6)},
      {"u8", make_tensor({3}, at::kByte, 7)},          {"bool", make_tensor({5}, at::kBool, 8)},
      {"scalar", at::scalar_tensor(2.5, at::kFloat)},  {"empty", at::empty({0, 3}, at::kFloat)},
      {"noncontig", make_tensor({4, 6}, at::kFloat, 9).t()}};
  const std::string path = tmp / "model.safetensors";
  fsdp::ckpt::safetensors::save_file(path, tensors, {{"hello", "world"}});

  auto loaded = fsdp::ckpt::safetensors::load_file(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  std::map<std::string, at::Tensor> by_name(loaded.begin(), loaded.end());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const at::Tensor& got = by_name[name];
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(got, t.contiguous())) << name;
  }

  // The bytes follow the spec, checked without our reader: u64 LE header
  // length, JSON header, 8-byte aligned data, entries at their offsets.
  const std::string bytes = fsdp::ckpt::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  rapidjson::Document header;
  header.Parse(bytes.substr(8, n).c_str());
  ASSERT_FALSE(header.HasParseError());
  EXPECT_STREQ(header["__metadata__"]["hello"].GetString(), "world");
  EXPECT_STREQ(header["bf16"]["dtype"].GetString(), "BF16");
  EXPECT_STREQ(header["f16"]["dtype"].GetString(), "F16");
  EXPECT_STREQ(header["i64"]["dtype"].GetString(), "I64");
  EXPECT_STREQ(header["bool"]["dtype"].GetString(), "BOOL");
  EXPECT_TRUE(header["scalar"]["shape"].IsArray() && header["scalar"]["shape"].Empty());
  const std::vector<int64_t> off = {header["f64"]["data_offsets"][0].GetInt64(),
                                    header["f64"]["data_offsets"][1].GetInt64()};
  ASSERT_EQ(off[1] - off[0], 6 * 8);
  double first = 0;
  std::memcpy(&first, bytes.data() + 8 + n + off[0], 8);
  EXPECT_EQ(first, tensors[3].second[0].item<double>());
  EXPECT_EQ(8 + n + header["empty"]["data_offsets"][1].GetUint64() <= bytes.size(), true);
}

TEST(Safetensors, RejectsExistingFileUnlessOverwrite) {
  TempDir tmp;
  const std::string path = tmp / "a.safetensors";
  fsdp::ckpt::safetensors::save_file(path, {{"x", at::ones({2})}});
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::save_file(path, {{"x", at::zeros({2})}}), "already exists");
  fsdp::ckpt::safetensors::save_file(path, {{"x", at::zeros({2})}}, {}, /*overwrite=*/true);
  EXPECT_TRUE(at::equal(fsdp::ckpt::safetensors::load_file(path)[0].second, at::zeros({2})));
  for (const auto& entry : fs::directory_iterator(tmp.path()))
    EXPECT_EQ(entry.path().filename().string(), "a.safetensors") << "temporary file left behind";
}

TEST(Safetensors, CorruptHeadersAreNamed) {
  TempDir tmp;
  const std::string path = tmp / "bad.safetensors";
  fsdp::ckpt::write_file_atomic(path, std::string("\x05\x00\x00\x00", 4), false);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "bad.safetensors' is not a safetensors file");

  std::string huge(16, '\0');
  huge[0] = '\x7f';
  huge[3] = '\x01';
  fsdp::ckpt::write_file_atomic(path, huge, true);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "header length field says");

  std::string garbage(8, '\0');
  garbage[0] = 8;
  garbage += "{nope!!}";
  fsdp::ckpt::write_file_atomic(path, garbage, true);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "invalid JSON");

  // Entry lying past the end of the data: a truncated file.
  fsdp::ckpt::safetensors::save_file(path, {{"x", at::ones({1000})}}, {}, true);
  fs::resize_file(path, fs::file_size(path) - 8);
  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::read_header(path), "is truncated: tensor 'x'");

  EXPECT_THROWS_WITH(fsdp::ckpt::safetensors::dtype_name(at::kComplexFloat), "cannot be stored in safetensors");
}

TEST(CheckpointIndex, JsonRoundTripAndValidation) {
  fsdp::ckpt::Index index;
  index.world_size = 2;
  index.step = 42;
  index.extras_json = R"({"lr":0.5,"loader":{"epoch":3}})";
  index.checksum_block_bytes = 16;
  index.files = {{"rank-00000-of-00002.safetensors", 0, 100, std::nullopt},
                 {"rank-00001-of-00002.safetensors", 1, 80, std::nullopt}};
  fsdp::ckpt::TensorInfo t{"w", {2, 5}, at::kFloat, {}};
  t.pieces.push_back({0, "w@0", 0, 6, 64, {0x0123456789abcdefULL, 0xfedcba9876543210ULL}});
  t.pieces.push_back({1, "w@6", 6, 10, 72, {42}});
  index.tensors.push_back(t);
  index.tensors.push_back({"s", {}, at::kLong, {{0, "s@0", 0, 1, 88, {7}}}});

  const std::string j = index.to_json();
  rapidjson::Document parsed;
  parsed.Parse(j.c_str());
  ASSERT_FALSE(parsed.HasParseError()) << j;
  EXPECT_STREQ(parsed["format"].GetString(), "libfsdp-checkpoint");
  EXPECT_STREQ(parsed["tensors"][0]["pieces"][0]["block_xxh64"][0].GetString(), "0123456789abcdef");
  EXPECT_EQ(parsed["extras"]["loader"]["epoch"].GetInt(), 3);
  const auto back = fsdp::ckpt::Index::from_json(j, "test");
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(back.tensors[0].pieces[1].block_checksums[0], 42u);
  EXPECT_EQ(back.extras_json, index.extras_json);

  auto gap = index;
  gap.tensors[0].pieces[1].flat_begin = 7;
  EXPECT_THROWS_WITH(gap.validate("idx"), "tensor 'w' pieces leave a gap at element 6");
  auto overlap = index;
  overlap.tensors[0].pieces[1].flat_begin = 5;
  overlap.tensors[0].pieces[1].block_checksums = {1, 2};  // 5 floats = 20 bytes = 2 blocks
  EXPECT_THROWS_WITH(overlap.validate("idx"), "tensor 'w' pieces overlap at element 5");
  auto short_cover = index;
  short_cover.tensors[0].shape = {2, 6};
  EXPECT_THROWS_WITH(short_cover.validate("idx"), "has 12 elements but its pieces cover only [0, 10)");
  auto bad_hashes = index;
  bad_hashes.tensors[0].pieces[0].block_checksums.pop_back();
  EXPECT_THROWS_WITH(bad_hashes.validate("idx"), "has 1 block checksums, expected 2");
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = j;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << j;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(replaced("\"format_version\": 1", "\"format_version\": 99"), "idx"),
                     "format_version 99");
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(
                         replaced("\"rank-00000-of-00002.safetensors\"", "\"../etc/passwd\""), "idx"),
                     "must be a plain name");
  // A field of the wrong type is named, with the file.
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(replaced("\"step\": 42", "\"step\": \"42\""),
                                                  "checkpoint index 'x/index.json'"),
                     "checkpoint index 'x/index.json': field 'step' is not an integer (it is a string)");
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(replaced("\"extras\": {", "\"extras\": [1], \"x\": {"), "idx"),
                     "field 'extras' is not an object (it is an array)");
}

// Issue #13, points 6 and 7: every field read from disk is range- and
// overflow-checked, so a damaged index is an error, never a resumed run with a
// negative step or a wrapped size that passes the other checks.
TEST(CheckpointIndex, FieldsFromDiskAreRangeAndOverflowChecked) {
  fsdp::ckpt::Index index;
  index.checksum_block_bytes = 16;
  index.files = {{"rank-00000-of-00001.safetensors", 0, 100, std::nullopt}};
  index.tensors.push_back({"s", {}, at::kLong, {{0, "s@0", 0, 1, 88, {7}}}});
  index.validate("idx");

  auto negative_step = index;
  negative_step.step = -5;
  EXPECT_THROWS_WITH(fsdp::ckpt::Index::from_json(negative_step.to_json(), "idx"),
                     "idx: step must be >= 0, got -5");
  auto huge = index;
  huge.tensors[0].shape = {16384, (int64_t{1} << 50) + 1};
  EXPECT_THROWS_WITH(huge.validate("idx"),
                     "tensor 's' of shape [16384, 1125899906842625]: its element count overflows "
                     "int64");
  auto huge_bytes = index;
  huge_bytes.tensors[0].shape = {int64_t{1} << 61};
  EXPECT_THROWS_WITH(huge_bytes.validate("idx"), "tensor 's': its byte size overflows int64");
  auto past_end = index;
  past_end.tensors[0].pieces[0].flat_end = int64_t{1} << 62;
  EXPECT_THROWS_WITH(past_end.validate("idx"), "has 1 elements but a piece ends at");
  auto negative_size = index;
  negative_size.files[0].bytes = -1;
  EXPECT_THROWS_WITH(negative_size.validate("idx"), "has a negative size -1");
}
