// Text <-> token ids. Four vocabularies: raw bytes (no files needed, for tests and toy runs), tiktoken-format
// BPE (Llama 3's tokenizer.model), a Hugging Face byte-level BPE tokenizer.json and a SentencePiece
// tokenizer.model (Llama 2). The fingerprint lets checkpoints and shards refuse a different vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fedshard::data {

enum class TokenizerKind : uint32_t { Bytes = 1, Tiktoken = 2, HuggingFace = 3, SentencePiece = 4 };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // No BOS/EOS added. Not safe to call on one tokenizer from several threads at once (a tokenizer keeps its
  // buffers, cache or helper process): each thread makes its own, as prepare's workers do.
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<uint32_t>& ids) const = 0;  // specials: their text (SentencePiece: none)
  virtual uint32_t vocab_size() const = 0;
  virtual uint32_t bos_id() const = 0;
  virtual uint32_t eos_id() const = 0;
  virtual TokenizerKind kind() const = 0;
  virtual std::string spec() const = 0;        // "bytes", "tiktoken:PATH", "hf:PATH" or "sentencepiece:PATH" (as given)
  virtual uint64_t fingerprint() const = 0;    // identifies the vocabulary: bytes -> fixed constant; files -> FNV-1a 64 of their contents
};

// What --tokenizer takes, for help texts and errors.
inline constexpr const char* kTokenizerSpecs =
    "bytes | tiktoken:FILE (Llama 3 tokenizer.model) | hf:tokenizer.json (byte-level BPE) | "
    "sentencepiece:tokenizer.model (Llama 2)";

// spec: "bytes" | "tiktoken:PATH" | "hf:PATH/tokenizer.json" | "sentencepiece:PATH/tokenizer.model". Throws fedshard::Error on an unknown spec or unreadable/malformed file.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace fedshard::data
