#include "data/tokenizer.h"

#include "data/bpe_tokenizer.h"
#include "data/byte_tokenizer.h"
#include "util/error.h"

namespace fedshard::data {

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  const std::string_view prefix = "tiktoken:";
  if (spec.size() > prefix.size() && spec.compare(0, prefix.size(), prefix) == 0) {
    return std::make_unique<BpeTokenizer>(spec.substr(prefix.size()));
  }
  throw Error(cat("unknown tokenizer spec \"", spec, "\" (expected \"bytes\" or \"tiktoken:PATH\")"));
}

}  // namespace fedshard::data
