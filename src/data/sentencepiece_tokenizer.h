// A SentencePiece tokenizer.model (the Llama 2, Mistral and TinyLlama families; BPE or unigram, any normalizer)
// through Debian's libsentencepiece, which runs in a helper process (sentencepiece_helper.cpp says why).
//
// Ids equal the library's Encode(text): the model's own normalization and dummy prefix, no BOS/EOS; control
// tokens' text inside a document ("<s>") is text, as the library has it. decode() is the library's Decode, so
// BOS and EOS decode to nothing (unlike the other tokenizers, where specials decode to their text). A model
// without EOS is refused (prepare ends every document with it); one without BOS uses EOS as BOS, as the
// tokenizer.json reader does.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "util/helper_process.h"

namespace fedshard::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path);  // throws fedshard::Error naming the file

  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<uint32_t>& ids) const override;
  uint32_t vocab_size() const override { return vocab_size_; }
  uint32_t bos_id() const override { return bos_; }
  uint32_t eos_id() const override { return eos_; }
  TokenizerKind kind() const override { return TokenizerKind::SentencePiece; }
  std::string spec() const override { return "sentencepiece:" + path_; }
  uint64_t fingerprint() const override { return fingerprint_; }

 private:
  // Sends one request and returns the reply's payload (after kOk); throws on a failure or a helper that ended.
  std::string exchange(uint8_t op, std::string_view payload, size_t item_bytes) const;

  std::string path_;
  uint64_t fingerprint_ = 0;
  uint32_t vocab_size_ = 0, bos_ = 0, eos_ = 0;
  mutable HelperProcess helper_;
  mutable std::mutex mutex_;  // one request at a time on the socket
};

// True when PATH holds a serialized SentencePiece model rather than a tiktoken ranks file (both are named
// tokenizer.model): a model starts with its first piece, protobuf field 1 (tag byte 0x0A).
bool is_sentencepiece_model(const std::string& path);

}  // namespace fedshard::data
