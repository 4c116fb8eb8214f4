// Lines of a text file that may be compressed: plain, gzip (.gz, zlib) or Zstandard (.zst, libzstd), chosen by
// the file name's extension. Streams with a fixed buffer, so memory does not grow with the file.
#pragma once

#include <memory>
#include <string>

namespace fedshard::data {

class LineReader {
 public:
  explicit LineReader(const std::string& path);  // throws fedshard::Error naming the file
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its '\n' (and a '\r' before it); false at the end. A corrupt or truncated
  // compressed stream is a fedshard::Error naming the file.
  bool next(std::string& line);
  int64_t line_number() const { return line_number_; }  // 1-based number of the last line returned

  class Source;  // the decompressor behind it

 private:
  bool fill();

  std::string path_;
  std::unique_ptr<Source> source_;
  std::string buffer_;
  size_t begin_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

// True for the names LineReader decompresses: *.gz, *.zst.
bool is_compressed(const std::string& path);

}  // namespace fedshard::data
