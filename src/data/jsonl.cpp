#include "data/jsonl.h"

#include <simdjson.h>

#include "util/error.h"

namespace fedshard::data {

struct JsonlParser::Impl {
  simdjson::dom::parser parser;
};

JsonlParser::JsonlParser(std::string text_key, std::string source_key)
    : impl_(std::make_unique<Impl>()), text_key_(std::move(text_key)), source_key_(std::move(source_key)) {}

JsonlParser::~JsonlParser() = default;

namespace {

std::string string_field(const simdjson::dom::object& record, const std::string& key) {
  std::string_view value;
  const auto field = record[key];
  FS_CHECK(field.error() != simdjson::NO_SUCH_FIELD, "the record has no \"", key, "\" key");
  FS_CHECK(field.get_string().get(value) == simdjson::SUCCESS, "\"", key, "\" is not a string");
  return std::string(value);
}

}  // namespace

void JsonlParser::parse(std::string_view line, JsonlRecord& out) {
  simdjson::dom::element doc;
  const auto err = impl_->parser.parse(line.data(), line.size(), /*realloc_if_needed=*/true).get(doc);
  FS_CHECK(err == simdjson::SUCCESS, "invalid JSON (", simdjson::error_message(err), ")");
  simdjson::dom::object record;
  FS_CHECK(doc.get_object().get(record) == simdjson::SUCCESS, "the line is not a JSON object");
  out.text = string_field(record, text_key_);
  if (!source_key_.empty()) out.source = string_field(record, source_key_);
}

}  // namespace fedshard::data
