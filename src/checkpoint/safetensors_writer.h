#pragma once
// The streaming safetensors writer (the format is described in
// fsdp/checkpoint/safetensors.h): every entry is declared up front, the
// header is written at once, then each entry's bytes in declaration order,
// so memory stays bounded by one tensor when writing a file far larger than
// memory. Used by the rank files and `fsdp-ckpt consolidate`. Internal to
// src/checkpoint.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fsdp/checkpoint/safetensors.h"

namespace fsdp::ckpt {
class OutputFile;
}

namespace fsdp::ckpt::safetensors {

// Serializes a header for `entries` (whose begin/end must already be laid out)
// into the 8-byte length plus JSON padded to a multiple of 8 bytes.
std::string encode_header(const std::vector<Entry>& entries,
                          const std::map<std::string, std::string>& metadata);

// Entries are declared (key, dtype, shape) in the constructor and written in
// that order with write_next().
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
  // xxh64 of the header bytes, [0, data_start()).
  uint64_t header_checksum() const { return header_checksum_; }

 private:
  OutputFile& out_;
  std::vector<Entry> entries_;
  int64_t data_start_ = 0;
  uint64_t header_checksum_ = 0;
  size_t next_ = 0;
};

}  // namespace fsdp::ckpt::safetensors
