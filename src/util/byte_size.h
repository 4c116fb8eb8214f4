// Sizes written as people write them on command lines.
#pragma once

#include <cstdint>
#include <string>

namespace fedshard {

// "5GB", "500MB", "20KB", "1GiB", "123" -> bytes (GB = 1e9, as transformers' max_shard_size). Throws
// fedshard::Error on anything else.
int64_t parse_byte_size(const std::string& text);

}  // namespace fedshard
