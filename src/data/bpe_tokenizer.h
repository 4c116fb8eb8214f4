// Byte-pair encoding over a tiktoken ranks file (the format of Llama 3's tokenizer.model), with Llama 3.1's
// 256 special tokens after the regular ones.
//
// encode() treats its input as plain text: a literal "<|begin_of_text|>" in the input is encoded as ordinary
// bytes, never as the special id, so untrusted documents cannot inject control tokens. Callers add BOS/EOS
// and other specials by id. decode() renders special ids as their names.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bpe_merge.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"

namespace fedshard::data {

class BpeTokenizer final : public Tokenizer {
 public:
  static constexpr uint32_t kNumSpecials = 256;

  explicit BpeTokenizer(const std::string& path);  // throws fedshard::Error naming the file (and line)
  // ranks_ holds views into tokens_, so an instance must stay where it was built.
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  uint32_t vocab_size() const override { return num_regular() + kNumSpecials; }
  uint32_t bos_id() const override { return num_regular(); }      // <|begin_of_text|>
  uint32_t eos_id() const override { return num_regular() + 1; }  // <|end_of_text|>
  TokenizerKind kind() const override { return TokenizerKind::Tiktoken; }
  std::string spec() const override { return "tiktoken:" + path_; }
  uint64_t fingerprint() const override { return fingerprint_; }

 private:
  uint32_t num_regular() const { return static_cast<uint32_t>(tokens_.size()); }
  uint32_t rank_of(std::string_view bytes) const;

  std::string path_;
  uint64_t fingerprint_ = 0;
  std::vector<std::string> tokens_;                         // rank -> token bytes
  std::unordered_map<std::string_view, uint32_t> ranks_;   // token bytes (views into tokens_) -> rank
  std::array<uint32_t, 256> byte_rank_{};                   // each byte's rank; kNoRank if absent
  MergeTable merges_;                                       // (left, right) -> the token they make
  mutable BpeMerger merger_;
  std::vector<std::string> special_names_;                  // id - num_regular() -> name
  Pretokenizer pretokenizer_;
};

}  // namespace fedshard::data
