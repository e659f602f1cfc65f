#pragma once
// Damaging a file on purpose, as a failing disk or a stray write would, for
// the tests that check corruption is found and named.

#include <cstdint>
#include <fstream>
#include <ios>
#include <string>

namespace fsdp::testing {

// XORs the byte at `offset` (from the end if negative: -1 is the last byte).
inline void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto where = offset < 0 ? std::ios::end : std::ios::beg;
  f.seekg(offset, where);
  char byte = 0;
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  f.seekp(offset, where);
  f.write(&byte, 1);
}

}  // namespace fsdp::testing
