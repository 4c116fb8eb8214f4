// Byte-level BPE from a Hugging Face tokenizer.json (the GPT-2, Llama 3 and Qwen2 families): the pre-tokenizer's
// regex from the file, the model's vocab and merges, its added special tokens. Anything else the file asks for
// (a normalizer, another pre-tokenizer or model type, a decoder other than byte-level, truncation, padding,
// non-special added tokens) is refused in one line naming the key, never ignored.
//
// Ids equal the `tokenizers` library's encode(text, add_special_tokens=False) with one deliberate difference, as
// for the tiktoken tokenizer: a special token's text inside a document ("<|endoftext|>") is encoded as ordinary
// text, never as the special id, so a corpus cannot inject control tokens. Callers add BOS/EOS by id.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bpe_merge.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"

namespace fedshard::data {

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const std::string& path);  // throws fedshard::Error naming the file and the key

  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  uint32_t vocab_size() const override { return static_cast<uint32_t>(text_of_id_.size()); }
  uint32_t bos_id() const override { return bos_; }
  uint32_t eos_id() const override { return eos_; }
  TokenizerKind kind() const override { return TokenizerKind::HuggingFace; }
  std::string spec() const override { return "hf:" + path_; }
  uint64_t fingerprint() const override { return fingerprint_; }

 private:
  std::string path_;
  uint64_t fingerprint_ = 0;
  std::vector<std::string> text_of_id_;             // id -> bytes (specials: their content)
  std::vector<bool> known_id_;                      // an id the file defines (the vocab may have gaps)
  std::unordered_map<std::string, uint32_t> vocab_;  // token bytes -> id, the model's vocab only
  std::array<uint32_t, 256> byte_id_{};
  MergeTable merges_;  // priority: the merge's place in the merges list
  mutable BpeMerger merger_;
  bool ignore_merges_ = false;  // a piece that is a whole token is that token, merges or not (Llama 3)
  uint32_t bos_ = 0, eos_ = 0;
  std::unique_ptr<Pretokenizer> pretokenizer_;
};

}  // namespace fedshard::data
