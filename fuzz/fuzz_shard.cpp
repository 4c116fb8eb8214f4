// A token shard: its 48-byte header checked against what a manifest expects, then the tokens mapped. The
// expectation is taken from the input's own header where it parses, so the fuzzer also reaches past it.
#include <cstring>

#include "data/shard_file.h"
#include "fuzz_input.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fedshard::fuzz::write_input("train-x-000.bin", data, size);
  fedshard::data::ShardExpectation want;
  if (size >= 48) {
    // The header's own claims (tokens at offset 24, checksum at 40, fingerprint at 32, vocab at 16).
    std::memcpy(&want.tokens, data + 24, 8);
    std::memcpy(&want.checksum, data + 40, 8);
    std::memcpy(&want.fingerprint, data + 32, 8);
    std::memcpy(&want.vocab_size, data + 16, 4);
    uint32_t kind = 0;
    std::memcpy(&kind, data + 12, 4);
    if (kind == static_cast<uint32_t>(fedshard::data::TokenizerKind::Tiktoken)) want.kind = fedshard::data::TokenizerKind::Tiktoken;
  }
  try {
    fedshard::data::ShardFile shard(path, want);
    uint64_t sum = 0;
    for (int64_t i = 0; i < shard.size(); ++i) sum += shard.tokens()[i];
    (void)sum;
  } catch (const fedshard::Error&) {
  }
  return 0;
}
