#include "data/parquet_records.h"

#include "data/parquet_protocol.h"
#include "util/error.h"

namespace fedshard::data {
namespace {

namespace pq_proto = parquet_protocol;

std::vector<std::string> helper_args(const std::string& path, const std::string& text, const std::string& source) {
  FS_CHECK(ParquetRecords::available(), path, ": Parquet input needs the helper fedshard-parquet, which the build ",
           "makes when the project venv has pyarrow: bash scripts/setup-hf.sh, then make build");
  std::vector<std::string> args = {path, text};
  if (!source.empty()) args.push_back(source);
  return args;
}

}  // namespace

bool ParquetRecords::available() { return HelperProcess::available("fedshard-parquet"); }

ParquetRecords::ParquetRecords(const std::string& path, const std::string& text_column,
                               const std::string& source_column)
    : path_(path),
      helper_("fedshard-parquet", helper_args(path, text_column, source_column), "the Parquet reader", path) {}

bool ParquetRecords::next(JsonlRecord& out) {
  const char* doing = "reading it";
  const auto kind = helper_.recv_value<uint32_t>(doing);
  if (kind == pq_proto::kEnd) return false;
  auto read_string = [&](std::string& s) {
    s.resize(helper_.recv_value<uint32_t>(doing));
    helper_.recv(s.data(), s.size(), doing);
  };
  if (kind == pq_proto::kFailed) {
    std::string message;
    read_string(message);
    throw Error(cat(path_, ": ", message));
  }
  FS_CHECK(kind == pq_proto::kRecord, path_, ": the Parquet reader sent ", kind, ", not a record");
  read_string(out.text);
  read_string(out.source);
  ++row_;
  return true;
}

}  // namespace fedshard::data
