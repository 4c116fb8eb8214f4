// FNV-1a 64: a tiny, fully specified hash for checksums and fingerprints (not for security). Incremental:
// pass the previous result as `h` to continue over the next bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fedshard {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ULL;

inline uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

}  // namespace fedshard
