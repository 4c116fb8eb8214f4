// 64-bit values as 16 hex digits: how checksums and fingerprints appear in JSON (a JSON number would lose
// bits in readers that parse numbers as doubles) and in messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fedshard {

inline std::string hex64(uint64_t v) {
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = "0123456789abcdef"[v & 15];
  return s;
}

// Exactly 16 hex digits (either case); nullopt otherwise.
inline std::optional<uint64_t> parse_hex64(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace fedshard
