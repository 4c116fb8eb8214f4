// A Hugging Face tokenizer.json: where it loads, its encoder runs over the file's own bytes, and what it encodes
// must decode back to the same bytes (byte-level BPE loses nothing).
#include "data/hf_tokenizer.h"
#include "fuzz_input.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fedshard::fuzz::write_input("tokenizer.json", data, size);
  try {
    const fedshard::data::HfTokenizer tok(path);
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    if (tok.decode(tok.encode(text)) != text) __builtin_trap();
  } catch (const fedshard::Error&) {
  }
  return 0;
}
