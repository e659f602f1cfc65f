#pragma once
// The training data: a byte corpus split into train and validation bytes,
// and the sampler that turns (seed, step) into a global batch of windows.
//
// [Note: batches independent of the world size]
// Row r of step s's global batch is the window starting at
// hash(seed, split, s, r) mod (bytes - context). A rank computes only the
// rows of its contiguous slice [rank * per_rank, (rank + 1) * per_rank), and
// micro-batch m of that slice is rows [m * micro, (m + 1) * micro). The
// global batch is therefore the same at every world size and micro-batch
// split, and a resumed run (which knows only the step) sees the same batches
// as an uninterrupted one. The hash is splitmix64, fixed here, so the data
// order does not depend on the standard library's distributions either.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp_train {

struct ByteCorpus {
  std::string source;              // the file or directory it came from
  std::vector<std::string> files;  // the files read, in order
  std::vector<uint8_t> train;      // the first 90% of each file, concatenated
  std::vector<uint8_t> val;        // the last 10% of each file, concatenated
  uint64_t checksum = 0;           // FNV-1a of every byte read, in order

  int64_t total_bytes() const { return static_cast<int64_t>(train.size() + val.size()); }
};

// Reads `path` (a text file), or every plain-text file under the fortunes
// directory when `path` is empty. Throws std::runtime_error naming the path
// and the fix when it is missing, unreadable, binary or too small for
// windows of `context` + 1 bytes.
ByteCorpus load_corpus(const std::string& path, int64_t context);

enum class Split { kTrain, kVal };

// A batch of next-byte prediction rows: inputs and targets [rows, context],
// int64 byte values; targets are the inputs shifted by one.
struct Batch {
  at::Tensor inputs;
  at::Tensor targets;
};

class BatchSampler {
 public:
  BatchSampler(const ByteCorpus& corpus, int64_t context, uint64_t seed);

  // Where row `row` of batch `index` of `split` starts. `index` is the
  // optimizer step for training batches and the evaluation batch number for
  // validation batches. See [Note: batches independent of the world size].
  int64_t window_start(Split split, int64_t index, int64_t row) const;

  // Rows [first_row, first_row + rows) of batch `index` of `split`.
  Batch rows(Split split, int64_t index, int64_t first_row, int64_t rows) const;

 private:
  const std::vector<uint8_t>& bytes(Split split) const;

  const ByteCorpus& corpus_;
  int64_t context_;
  uint64_t seed_;
};

}  // namespace fsdp_train
