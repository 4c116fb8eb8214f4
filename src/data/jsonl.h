// Records of a JSONL corpus file (one JSON object per line, as Hugging Face datasets dump them): the
// document's text under a key (default "text") and, optionally, a source label under another.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace fedshard::data {

struct JsonlRecord {
  std::string text;
  std::string source;  // empty unless a source key is asked for
};

class JsonlParser {
 public:
  JsonlParser(std::string text_key, std::string source_key);
  ~JsonlParser();
  JsonlParser(const JsonlParser&) = delete;
  JsonlParser& operator=(const JsonlParser&) = delete;

  // Parses and validates one whole line (simdjson's DOM parser). Throws fedshard::Error saying what is wrong
  // (invalid JSON, not an object, a key missing or not a string); the caller adds FILE:LINE.
  void parse(std::string_view line, JsonlRecord& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string text_key_, source_key_;
};

}  // namespace fedshard::data
