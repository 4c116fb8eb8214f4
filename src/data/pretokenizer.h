// A regex pre-tokenizer: the pattern splits text into pieces (words with their leading space, runs of digits,
// punctuation runs, whitespace) and BPE then runs inside each piece only. Llama 3's tiktoken pattern by default,
// or the Split regex of a Hugging Face tokenizer.json.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fedshard::data {

class Pretokenizer {
 public:
  Pretokenizer();  // Llama 3's pattern, its classes read alike; compiled once (JIT where the platform allows it)
  // A Hugging Face Split pre-tokenizer's regex with behavior "Isolated": text between two matches is a piece of
  // its own. `\s`, `\S`, `\p{L}` and `\p{N}` are read as the Hugging Face and tiktoken engines read them (Unicode
  // White_Space; letters and digits up to Unicode 16: unicode_classes.h).
  // Throws fedshard::Error naming `what` when the pattern does not compile.
  Pretokenizer(std::string_view hf_pattern, const std::string& what);
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // The pieces of text, in order; they concatenate back to text exactly. Throws fedshard::Error if text is
  // not valid UTF-8. Safe to call from several threads at once.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Pattern;
  std::unique_ptr<Pattern> pattern_;
  bool gaps_are_pieces_ = false;  // tiktoken's findall drops unmatched text; its pattern leaves none
};

}  // namespace fedshard::data
