#pragma once
// Loading a checkpoint on any world size: a Reader answers "elements
// [flat_begin, flat_begin + numel) of tensor X" by reading only the byte
// ranges of the rank files that hold them, and verifies the checksum of every
// block it reads. It needs no process group; each rank opens its own.
//
//   auto reader = fsdp::ckpt::Reader::open("ckpt/step-1000");
//   at::Tensor mine = reader.read("layers.0.weight", my_begin, my_numel);  // 1-D
//   at::Tensor full = reader.read_full("embed.weight");                    // global shape

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fsdp::ckpt {

// The parsed index.json: libfsdp's own type (src/checkpoint/index.h). Its
// layout is not part of the API; Reader's methods answer what it holds.
struct Index;
struct TensorInfo;

struct VerifyReport {
  int64_t tensors = 0;
  int64_t pieces = 0;
  int64_t bytes = 0;  // data bytes checked
};

class Reader {
 public:
  // Reads and validates DIR/index.json (see read_index() for the errors).
  // Data files are opened lazily, on the first read that needs them.
  static Reader open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // For libfsdp's own code and tests, which see src/checkpoint/index.h.
  const Index& index() const { return *index_; }

  // Tensor names in save order.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const std::vector<int64_t>& global_shape(const std::string& name) const;
  at::ScalarType dtype(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  // How many pieces (contiguous runs of elements, one per saving rank that
  // held some of it) the tensor was saved in.
  int64_t piece_count(const std::string& name) const;

  int64_t step() const;
  // The extras the checkpoint was saved with (SaveOptions::extras_json): a
  // JSON object as compact text, "{}" when none were given.
  const std::string& extras_json() const;
  int saved_world_size() const;
  // index.json's format version (docs/checkpoint-format.md).
  int format_version() const;
  // Rank data files in the checkpoint (one per saving rank).
  int64_t file_count() const;
  // Bytes per xxh64 checksum block (SaveOptions::checksum_block_bytes).
  int64_t checksum_block_bytes() const;

  // Elements [flat_begin, flat_begin + numel) of the flattened tensor, as a
  // new 1-D CPU tensor of its dtype. Throws naming the tensor for an unknown
  // name or an out-of-range request, and naming the file and the tensor for a
  // missing, truncated or corrupted data file.
  at::Tensor read(const std::string& name, int64_t flat_begin, int64_t numel) const;
  // The same into `out`: a contiguous CPU tensor of the tensor's dtype with
  // `numel` elements (its shape is ignored). Lets a caller fill its own buffer.
  void read_into(const std::string& name, int64_t flat_begin, const at::Tensor& out) const;
  // The whole tensor at its global shape.
  at::Tensor read_full(const std::string& name) const;

  // Reads every piece of every tensor and checks every block checksum and
  // every file size. Throws one error listing each problem (file and tensor).
  VerifyReport verify_all() const;

 private:
  struct Files;  // lazily opened data files, shared by copies of this Reader
  Reader() = default;
  const TensorInfo& tensor(const std::string& name) const;
  std::string file_path(int file) const;

  std::string dir_;
  std::shared_ptr<const Index> index_;
  std::shared_ptr<Files> files_;
};

}  // namespace fsdp::ckpt
