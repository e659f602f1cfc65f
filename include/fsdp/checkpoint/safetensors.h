#pragma once
// Reading and writing the safetensors format (https://github.com/huggingface/safetensors).
//
// A safetensors file is:
//   bytes [0, 8)         N, the header length, an unsigned 64-bit little-endian integer
//   bytes [8, 8+N)       a UTF-8 JSON object: for each tensor key
//                          {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//                        and an optional "__metadata__": {string: string}. The header may
//                        be padded with trailing spaces; we pad it to a multiple of 8 so
//                        every tensor's data is 8-byte aligned.
//   bytes [8+N, EOF)     the data: tensor bytes, little-endian, C order, at
//                        [8+N+begin, 8+N+end). Entries are contiguous and in file order.
//
// The distributed checkpoint writes one such file per rank (see rank_file.h);
// `fsdp-ckpt consolidate` writes a standard single file with this writer.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::ckpt {
class OutputFile;
}

namespace fsdp::ckpt::safetensors {

// "F32", "BF16", ... for the dtypes safetensors defines. Throws c10::Error for
// dtypes it cannot store (complex, quantized), naming the dtype.
std::string dtype_name(at::ScalarType dtype);
// The inverse. Throws for names we do not read (e.g. "F8_E4M3"), naming the name.
at::ScalarType dtype_from_name(const std::string& name);

struct Entry {
  std::string key;
  std::string dtype;           // safetensors dtype name, e.g. "F32"
  std::vector<int64_t> shape;  // [] for a scalar
  int64_t begin = 0;           // byte range relative to the start of the data section
  int64_t end = 0;
};

struct Header {
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::vector<Entry> entries;                   // in data-offset order
  int64_t data_start = 0;                       // absolute file offset of the data section: 8 + N
};

// Parses and validates the header of `path`: the length fits in the file, the
// JSON is an object, offsets are in range, consistent with dtype and shape, and
// do not overlap. Throws c10::Error naming the file and the problem.
Header read_header(const std::string& path);

// Serializes a header for `entries` (whose begin/end must already be laid out)
// into the 8-byte length plus JSON padded to a multiple of 8 bytes.
std::string encode_header(const std::vector<Entry>& entries,
                          const std::map<std::string, std::string>& metadata);

// A streaming writer: all entries are declared up front (key, dtype, shape),
// the header is written at once, then each entry's bytes are written in
// declaration order with write_next(). This keeps memory bounded by one
// tensor when writing a file far larger than memory.
class Writer {
 public:
  struct Declared {
    std::string key;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  // Writes the header into `out` (which must be positioned at offset 0).
  Writer(OutputFile& out, const std::vector<Declared>& entries,
         const std::map<std::string, std::string>& metadata);

  // Writes the next declared entry. `tensor` must have the declared dtype and
  // numel; it may live on any device and be non-contiguous. Returns the
  // absolute file offset its bytes start at.
  int64_t write_next(const at::Tensor& tensor);
  // Writes the next declared entry from raw bytes (exactly its byte length).
  int64_t write_next_bytes(const void* data, int64_t nbytes);

  // Checks every declared entry was written.
  void finish();

  const std::vector<Entry>& entries() const { return entries_; }
  int64_t data_start() const { return data_start_; }

 private:
  OutputFile& out_;
  std::vector<Entry> entries_;
  int64_t data_start_ = 0;
  size_t next_ = 0;
};

// Convenience: writes `tensors` (in order) to `path` atomically (temp file,
// fsync, rename). Fails if `path` exists unless `overwrite`.
void save_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
               const std::map<std::string, std::string>& metadata = {}, bool overwrite = false);

// Convenience: reads every tensor of `path` into CPU tensors, in file order.
std::vector<std::pair<std::string, at::Tensor>> load_file(const std::string& path);

// Reads one entry of an already parsed header into a CPU tensor.
at::Tensor read_entry(const std::string& path, const Header& header, const Entry& entry);

}  // namespace fsdp::ckpt::safetensors
