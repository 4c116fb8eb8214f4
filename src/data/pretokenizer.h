// Llama 3's pre-tokenizer: the tiktoken cl100k regex splits text into pieces (words with their leading space,
// runs of up to 3 digits, punctuation runs, whitespace) and BPE then runs inside each piece only.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace fedshard::data {

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the pattern once (JIT when the platform allows it)
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // The pieces of text, in order; they concatenate back to text exactly. Throws fedshard::Error if text is
  // not valid UTF-8. Safe to call from several threads at once.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Pattern;
  std::unique_ptr<Pattern> pattern_;
};

}  // namespace fedshard::data
