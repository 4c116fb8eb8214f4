#include "data/tokenizer.h"

#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "util/error.h"

namespace fedshard::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  const std::string_view prefix = "tiktoken:";
  if (spec.size() > prefix.size() && spec.compare(0, prefix.size(), prefix) == 0) {
    return std::make_unique<BpeTokenizer>(spec.substr(prefix.size()));
  }
  const std::string_view hf = "hf:";
  if (spec.size() > hf.size() && spec.compare(0, hf.size(), hf) == 0) {
    return std::make_unique<HfTokenizer>(spec.substr(hf.size()));
  }
  const std::string_view sentencepiece = "sentencepiece:";
  if (spec.size() > sentencepiece.size() && spec.compare(0, sentencepiece.size(), sentencepiece) == 0) {
    return std::make_unique<SentencePieceTokenizer>(spec.substr(sentencepiece.size()));
  }
  throw Error(cat("unknown tokenizer spec \"", spec, "\" (expected ", kTokenizerSpecs, ")"));
}

}  // namespace fedshard::data
