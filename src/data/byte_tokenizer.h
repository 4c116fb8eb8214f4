// One token per byte (ids 0..255) plus BOS = 256 and EOS = 257. Needs no vocabulary file and round-trips any
// byte string, so it is the tokenizer for tests and small demos.
#pragma once

#include "data/tokenizer.h"

namespace fedshard::data {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kBos = 256;
  static constexpr uint32_t kEos = 257;
  static constexpr uint32_t kVocabSize = 258;

  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  uint32_t vocab_size() const override { return kVocabSize; }
  uint32_t bos_id() const override { return kBos; }
  uint32_t eos_id() const override { return kEos; }
  TokenizerKind kind() const override { return TokenizerKind::Bytes; }
  std::string spec() const override { return "bytes"; }
  uint64_t fingerprint() const override;
};

}  // namespace fedshard::data
