// The pre-tokenizer and byte-level BPE on arbitrary bytes, with a ranks file of the 256 bytes and 300 merges.
// Property: valid UTF-8 comes back from decode(encode(x)) byte for byte; invalid UTF-8 is refused with the
// binary's one clear error (a fedshard::Error naming the byte), never a crash or a silent replacement.
#include <cstdlib>
#include <fstream>

#include "util/error.h"

#include "data/bpe_tokenizer.h"
#include "fuzz_input.h"

namespace {

const fedshard::data::BpeTokenizer& tokenizer() {
  static const fedshard::data::BpeTokenizer tok = [] {
    static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    auto encode = [](const std::string& s) {
      std::string out;
      for (size_t i = 0; i < s.size(); i += 3) {
        const uint32_t n = (static_cast<uint8_t>(s[i]) << 16) | (i + 1 < s.size() ? static_cast<uint8_t>(s[i + 1]) << 8 : 0) |
                           (i + 2 < s.size() ? static_cast<uint8_t>(s[i + 2]) : 0);
        out += b64[(n >> 18) & 63];
        out += b64[(n >> 12) & 63];
        out += i + 1 < s.size() ? b64[(n >> 6) & 63] : '=';
        out += i + 2 < s.size() ? b64[n & 63] : '=';
      }
      return out;
    };
    const auto path = fedshard::fuzz::work_dir() / "ranks.tiktoken";
    std::ofstream f(path);
    int rank = 0;
    for (int b = 0; b < 256; ++b) f << encode(std::string(1, static_cast<char>(b))) << " " << rank++ << "\n";
    for (int i = 0; i < 300; ++i) f << encode({static_cast<char>('a' + i / 26), static_cast<char>('a' + i % 26)}) << " " << rank++ << "\n";
    f.close();
    return fedshard::data::BpeTokenizer(path.string());
  }();
  return tok;
}

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF),
// written here independently of the tokenizer's own check.
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    size_t n;
    uint32_t cp;
    if (b < 0x80) { ++i; continue; }
    if (b >= 0xC2 && b <= 0xDF) { n = 1; cp = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) { n = 2; cp = b & 0x0F; }
    else if (b >= 0xF0 && b <= 0xF4) { n = 3; cp = b & 0x07; }
    else return false;
    if (i + n >= s.size()) return false;  // cut short
    for (size_t k = 1; k <= n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto& tok = tokenizer();
  const bool valid = valid_utf8(text);
  try {
    if (tok.decode(tok.encode(text)) != text) std::abort();
    if (!valid) std::abort();  // invalid UTF-8 tokenized without a word: a silent acceptance
  } catch (const fedshard::Error&) {
    if (valid) std::abort();  // well-formed text refused
  }
  return 0;
}
