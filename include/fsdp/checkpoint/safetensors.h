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
// The distributed checkpoint writes one such file per rank, and `fsdp-ckpt
// consolidate` a standard single file, with the streaming writer in
// src/checkpoint/safetensors_writer.h.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

// Convenience: writes `tensors` (in order) to `path` atomically (temp file,
// fsync, rename). Fails if `path` exists unless `overwrite`.
void save_file(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
               const std::map<std::string, std::string>& metadata = {}, bool overwrite = false);

// Convenience: reads every tensor of `path` into CPU tensors, in file order.
std::vector<std::pair<std::string, at::Tensor>> load_file(const std::string& path);

// Reads one entry of an already parsed header into a CPU tensor.
at::Tensor read_entry(const std::string& path, const Header& header, const Entry& entry);

}  // namespace fsdp::ckpt::safetensors
