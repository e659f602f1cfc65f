#include "checkpoint/checksum.h"

#include <c10/util/Exception.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>

namespace fsdp::ckpt {

uint64_t xxh64(const void* data, int64_t nbytes) {
  return XXH64(data, static_cast<size_t>(nbytes), /*seed=*/0);
}

std::vector<uint64_t> block_checksums(const void* data, int64_t nbytes, int64_t block_bytes) {
  TORCH_CHECK(block_bytes > 0, "fsdp: checksum block size must be positive, got ", block_bytes);
  std::vector<uint64_t> hashes;
  const char* p = static_cast<const char*>(data);
  for (int64_t off = 0; off < nbytes; off += block_bytes)
    hashes.push_back(xxh64(p + off, std::min(block_bytes, nbytes - off)));
  return hashes;
}

std::string checksum_to_hex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

uint64_t checksum_from_hex(const std::string& hex, const std::string& what) {
  TORCH_CHECK(hex.size() == 16 && hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
              "fsdp: ", what, ": checksum \"", hex, "\" is not 16 hex digits");
  return std::stoull(hex, nullptr, 16);
}

}  // namespace fsdp::ckpt
