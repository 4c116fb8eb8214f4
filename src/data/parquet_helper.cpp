// fedshard-parquet FILE TEXT_COLUMN [SOURCE_COLUMN]: streams a Parquet file's records to `fedshard prepare`
// (parquet_protocol.h). The Arrow and Parquet C++ libraries it is built with are those of the pinned pyarrow
// wheel; they bundle their own simdjson, protobuf and abseil under exported names that collide with the
// copies LibTorch and fedshard load, so they run in a process of their own.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "data/parquet_protocol.h"

namespace {

constexpr int kSocket = 3;  // fedshard's end of the socket (HelperProcess::kSocketFd)
namespace proto = fedshard::data::parquet_protocol;

void write_all(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(kSocket, p, n);
    if (put <= 0) std::_Exit(1);  // fedshard has gone (or stopped reading): nobody to answer
    p += put;
    n -= static_cast<size_t>(put);
  }
}

void write_u32(uint32_t v) { write_all(&v, sizeof v); }

void write_string(std::string_view s) {
  write_u32(static_cast<uint32_t>(s.size()));
  write_all(s.data(), s.size());
}

[[noreturn]] void fail(const std::string& message) {
  write_u32(proto::kFailed);
  write_string(message);
  std::exit(0);
}

template <typename T>
T check(arrow::Result<T> result, const char* doing) {
  if (!result.ok()) fail(std::string(doing) + ": " + result.status().ToString());
  return std::move(result).ValueOrDie();
}

bool holds_strings(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW: return true;
    case arrow::Type::DICTIONARY: return holds_strings(*static_cast<const arrow::DictionaryType&>(type).value_type());
    default: return false;
  }
}

// A column's leaf index for the batch reader; only a top-level string column (plain or dictionary-encoded, as a
// pandas category is written) is a document's text or label.
int leaf_of(const parquet::arrow::FileReader& reader, const arrow::Schema& schema, const std::string& name,
            const char* role) {
  const int field = schema.GetFieldIndex(name);
  if (field < 0) {
    std::string columns;
    for (const auto& f : schema.fields()) columns += (columns.empty() ? "" : ", ") + f->name();
    fail("no column \"" + name + "\" (" + role + "); its columns: " + columns);
  }
  const auto& type = *schema.field(field)->type();
  if (!holds_strings(type)) fail("column \"" + name + "\" (" + role + ") holds " + type.ToString() + ", not strings");
  return reader.manifest().schema_fields[static_cast<size_t>(field)].column_index;
}

// Row `i` of a string column of any of the layouts holds_strings accepts; false when it is null.
bool value_at(const arrow::Array& column, int64_t i, std::string_view& out) {
  if (column.IsNull(i)) return false;
  switch (column.type_id()) {
    case arrow::Type::STRING: out = static_cast<const arrow::StringArray&>(column).GetView(i); break;
    case arrow::Type::LARGE_STRING: out = static_cast<const arrow::LargeStringArray&>(column).GetView(i); break;
    case arrow::Type::STRING_VIEW: out = static_cast<const arrow::StringViewArray&>(column).GetView(i); break;
    default: {
      const auto& encoded = static_cast<const arrow::DictionaryArray&>(column);
      return value_at(*encoded.dictionary(), encoded.GetValueIndex(i), out);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: fedshard-parquet FILE TEXT_COLUMN [SOURCE_COLUMN] (fedshard's helper)\n");
    return 2;
  }
  const std::string text_column = argv[2], source_column = argc == 4 ? argv[3] : "";
  const auto file = check(arrow::io::ReadableFile::Open(argv[1]), "cannot open it");
  const auto reader = check(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), "not a Parquet file");
  std::shared_ptr<arrow::Schema> schema;
  if (const auto st = reader->GetSchema(&schema); !st.ok()) fail("cannot read its schema: " + st.ToString());
  // One column may be both the text and the source; the reader gives a column asked for twice only once.
  std::vector<int> leaves = {leaf_of(*reader, *schema, text_column, "the text")};
  const bool own_source = !source_column.empty() && source_column != text_column;
  if (own_source) leaves.push_back(leaf_of(*reader, *schema, source_column, "the source"));
  std::vector<int> row_groups(static_cast<size_t>(reader->num_row_groups()));
  for (size_t g = 0; g < row_groups.size(); ++g) row_groups[g] = static_cast<int>(g);
  // Memory: a row group's column chunks and one batch of 1,024 decoded rows, whatever the file's size.
  reader->set_batch_size(1024);
  const auto batches = check(reader->GetRecordBatchReader(row_groups, leaves), "cannot read its rows");

  int64_t row = 0;
  std::string_view text, source;
  while (true) {
    const auto batch = check(batches->Next(), "cannot read its rows");
    if (!batch) break;
    const auto& texts = *batch->column(0);
    for (int64_t i = 0; i < batch->num_rows(); ++i) {
      ++row;
      if (!value_at(texts, i, text)) fail("row " + std::to_string(row) + ": the text (\"" + text_column + "\") is null");
      source = {};
      if (!source_column.empty() && !value_at(*batch->column(own_source ? 1 : 0), i, source))
        fail("row " + std::to_string(row) + ": the source (\"" + source_column + "\") is null");
      if (text.size() > UINT32_MAX)
        fail("row " + std::to_string(row) + ": the text is " + std::to_string(text.size()) +
             " bytes, over the 4 GiB one record may hold");
      write_u32(proto::kRecord);
      write_string(text);
      write_string(source);
    }
  }
  write_u32(proto::kEnd);
  return 0;
}
