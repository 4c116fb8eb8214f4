#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "data/unicode_classes.h"
#include "util/error.h"

namespace fedshard::data {
namespace {

// Unicode White_Space, which tiktoken's and Hugging Face's regex engines take for \s. PCRE2's \s (with UCP) also
// takes U+180E MONGOLIAN VOWEL SEPARATOR, a format character, so "\u180e's" would split differently.
constexpr std::string_view kWhiteSpace =
    R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Llama 3's pat_str (tiktoken cl100k_base); with_reference_classes() spells out its classes.
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pattern with the classes tokenizers split by read as tiktoken's and Hugging Face's engines read them: \s
// and \S as kWhiteSpace, \p{L} and \p{N} (and \P) with the letters and digits of Unicode 15 and 16 added.
std::string with_reference_classes(std::string_view pattern, const std::string& what) {
  std::string out;
  bool in_class = false;
  // A class escape's members: bare inside a character class, wrapped in one (negated for \S, \P) outside.
  const auto put = [&](char escape, const std::string& members) {
    const bool negated = escape == 'S' || escape == 'P';
    FS_CHECK(!(negated && in_class), what, ": \\", escape, " inside a character class is not supported");
    out += in_class ? members : cat(negated ? "[^" : "[", members, "]");
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      const std::string_view rest = pattern.substr(i + 1, 3);
      if (e == 's' || e == 'S') {
        put(e, std::string(kWhiteSpace));
      } else if ((e == 'p' || e == 'P') && (rest == "{L}" || rest == "{N}")) {
        put(e, cat("\\p", rest, rest == "{L}" ? kLettersAfterUnicode14 : kDigitsAfterUnicode14));
        i += 3;
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int rc = pcre2_get_error_message(code, buf, sizeof(buf));
  if (rc < 0) return cat("PCRE2 error ", code);
  return std::string(reinterpret_cast<const char*>(buf));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

struct Pretokenizer::Pattern {
  pcre2_code* code = nullptr;

  Pattern(const std::string& pattern, const std::string& what) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                         &err, &err_offset, nullptr);
    FS_CHECK(code != nullptr, "cannot compile ", what, " at offset ", err_offset, ": ", pcre2_message(err));
    // A JIT failure (no JIT on this platform, or executable memory refused) only costs speed: pcre2_match then
    // interprets the pattern, so the result is deliberately not an error.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~Pattern() { pcre2_code_free(code); }
};

Pretokenizer::Pretokenizer()
    : pattern_(std::make_unique<Pattern>(with_reference_classes(kLlama3Pattern, "Llama 3's pattern"),
                                         "the pre-tokenizer pattern")) {}

Pretokenizer::Pretokenizer(std::string_view hf_pattern, const std::string& what)
    : pattern_(std::make_unique<Pattern>(with_reference_classes(hf_pattern, what), what)), gaps_are_pieces_(true) {}

Pretokenizer::~Pretokenizer() = default;

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(pattern_->code, nullptr));
  FS_CHECK(md != nullptr, "out of memory creating PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // The first call validates the UTF-8 of the whole subject; later calls start where a match ended (a character
  // boundary) and skip that O(n) re-check, which would otherwise make splitting quadratic.
  uint32_t options = 0;
  size_t offset = 0;
  while (offset < text.size()) {
    int rc = pcre2_match(pattern_->code, subject, text.size(), offset, options, md.get(), nullptr);
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
      throw Error(cat("text to tokenize is not valid UTF-8 at byte ", pcre2_get_startchar(md.get()), ": ",
                      pcre2_message(rc)));
    }
    if (rc == PCRE2_ERROR_NOMATCH && gaps_are_pieces_) {
      pieces.push_back(text.substr(offset));
      break;
    }
    FS_CHECK(rc > 0, "pre-tokenizer failed at byte ", offset, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (gaps_are_pieces_ && ov[0] > offset) pieces.push_back(text.substr(offset, ov[0] - offset));
    // Llama 3's pattern matches every character, so its matches tile the text; a gap would silently drop text.
    FS_CHECK(gaps_are_pieces_ || ov[0] == offset, "pre-tokenizer left text unmatched at byte ", offset);
    FS_CHECK(ov[1] > ov[0], "the pre-tokenizer pattern matched an empty string at byte ", ov[0],
             ": a pattern that can match nothing is not supported");
    pieces.push_back(text.substr(ov[0], ov[1] - ov[0]));
    offset = ov[1];
    options = PCRE2_NO_UTF_CHECK;
  }
  return pieces;
}

}  // namespace fedshard::data

#undef PCRE2_CODE_UNIT_WIDTH  // one source of a unity batch; see tests/unity_names.py
