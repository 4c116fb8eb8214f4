// The records of a Parquet file (Hugging Face datasets' shards: FineWeb, SlimPajama, ...): each row's text
// column and, optionally, a source column. Read by the fedshard-parquet helper process (parquet_helper.cpp
// says why apart), one row at a time as prepare takes them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/jsonl.h"
#include "util/helper_process.h"

namespace fedshard::data {

class ParquetRecords {
 public:
  // Throws fedshard::Error naming the file: unreadable, not Parquet, a missing or non-string column, or no
  // helper (a build without pyarrow).
  ParquetRecords(const std::string& path, const std::string& text_column, const std::string& source_column);

  bool next(JsonlRecord& out);  // false after the last row; throws naming the file and row (a null text)
  int64_t row() const { return row_; }  // of the record next() gave, from 1

  static bool available();  // this build has the helper

 private:
  std::string path_;
  HelperProcess helper_;
  int64_t row_ = 0;
};

}  // namespace fedshard::data
