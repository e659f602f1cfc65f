#pragma once
// Block checksums for checkpoint data: xxHash64 (seed 0) over consecutive
// fixed-size blocks of a piece's bytes, so a partial read verifies only the
// blocks it touches. Block i covers piece bytes [i*B, min((i+1)*B, n)).
// The default block size is SaveOptions' (fsdp/checkpoint/save.h).
// Hashes are written in the index as 16 lowercase hex digits (JSON numbers
// lose precision above 2^53 in many readers).

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp::ckpt {

uint64_t xxh64(const void* data, int64_t nbytes);

// The hashes of ceil(nbytes / block_bytes) blocks (none for nbytes == 0).
std::vector<uint64_t> block_checksums(const void* data, int64_t nbytes, int64_t block_bytes);

std::string checksum_to_hex(uint64_t hash);
// Throws c10::Error naming `what` if `hex` is not 16 hex digits.
uint64_t checksum_from_hex(const std::string& hex, const std::string& what);

}  // namespace fsdp::ckpt
