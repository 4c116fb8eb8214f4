#include "data/byte_tokenizer.h"

#include "util/error.h"

namespace fedshard::data {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (uint32_t id : ids) {
    if (id < 256) {
      text.push_back(static_cast<char>(id));
    } else if (id == kBos) {
      text += "<|begin_of_text|>";  // same names as the Llama 3 specials, so dumps read alike
    } else if (id == kEos) {
      text += "<|end_of_text|>";
    } else {
      throw Error(cat("token id ", id, " is out of range for the bytes tokenizer (vocab size ", kVocabSize, ")"));
    }
  }
  return text;
}

// FNV-1a 64 of the string "bytes": fixed, and a tiktoken file hashing to it is astronomically unlikely.
uint64_t ByteTokenizer::fingerprint() const { return 0x2f2ec0474f1c4fe4ULL; }

}  // namespace fedshard::data
