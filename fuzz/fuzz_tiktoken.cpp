// A tiktoken ranks file (Llama 3's tokenizer.model): base64 token bytes and a rank per line; where it loads,
// its encoder runs over the file's own bytes.
#include "data/bpe_tokenizer.h"
#include "fuzz_input.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fedshard::fuzz::write_input("tokenizer.model", data, size);
  try {
    const fedshard::data::BpeTokenizer tok(path);
    tok.decode(tok.encode(std::string_view(reinterpret_cast<const char*>(data), size)));
  } catch (const fedshard::Error&) {
  }
  return 0;
}
