#include "data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/error.h"

namespace fedshard::data {
namespace {

// Llama 3's pat_str (tiktoken cl100k_base):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with \s spelled out. tiktoken's regex engine reads \s as the Unicode White_Space property; PCRE2's \s (with
// UCP) also takes U+180E MONGOLIAN VOWEL SEPARATOR, which is a format character, so "\u180e's" would split
// differently. \p{L} and \p{N} are general categories in both engines.
#define FS_WHITE_SPACE R"(\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"
constexpr std::string_view kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^)" FS_WHITE_SPACE R"(\p{L}\p{N}]+[\r\n]*|)"
    R"([)" FS_WHITE_SPACE R"(]*[\r\n]+|[)" FS_WHITE_SPACE R"(]+(?![^)" FS_WHITE_SPACE R"(])|[)" FS_WHITE_SPACE R"(]+)";
#undef FS_WHITE_SPACE

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
  ~Pattern() { pcre2_code_free(code); }
};

Pretokenizer::Pretokenizer() : pattern_(std::make_unique<Pattern>()) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pattern_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  FS_CHECK(pattern_->code != nullptr, "cannot compile the pre-tokenizer pattern at offset ", err_offset, ": ",
           pcre2_message(err));
  // A JIT failure (no JIT on this platform, or executable memory refused) only costs speed: pcre2_match then
  // interprets the pattern, so the result is deliberately not an error.
  (void)pcre2_jit_compile(pattern_->code, PCRE2_JIT_COMPLETE);
}

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
    FS_CHECK(rc > 0, "pre-tokenizer failed at byte ", offset, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    // Every character matches some alternative, so matches tile the text; a gap would silently drop text.
    FS_CHECK(ov[0] == offset && ov[1] > offset, "pre-tokenizer left text unmatched at byte ", offset);
    pieces.push_back(text.substr(offset, ov[1] - offset));
    offset = ov[1];
    options = PCRE2_NO_UTF_CHECK;
  }
  return pieces;
}

}  // namespace fedshard::data
