#pragma once
// Writing the run dir's files so that a failure is never silent.
//
// [Note: a failed write is an error]
// With the disk full, std::ofstream only sets a flag: unread, metrics.jsonl
// would end mid-line while training went on. So every write to a run output
// checks the stream after flushing and throws naming the file
// and the system's reason, so the run stops with that message (rank 0's exit
// ends the job). The checkpoints written so far stay valid: each is committed
// atomically (see [Note: checkpoint commit protocol]).

#include <ostream>
#include <string>

namespace fsdp_train {

// Replaces `path` with `text`. Throws std::runtime_error naming the file and
// the reason if it cannot be opened or written in full.
void write_output_file(const std::string& path, const std::string& text);

// Flushes `out`, the stream of the output file `path`, and throws as above if
// any write to it has failed.
void flush_or_throw(std::ostream& out, const std::string& path);

}  // namespace fsdp_train
