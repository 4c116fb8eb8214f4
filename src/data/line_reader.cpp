#include "data/line_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace fedshard::data {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr size_t kChunk = 1 << 20;

}  // namespace

bool is_compressed(const std::string& path) { return ends_with(path, ".gz") || ends_with(path, ".zst"); }

// Appends up to kChunk decompressed bytes per call; returns 0 at the end of the stream.
class LineReader::Source {
 public:
  virtual ~Source() = default;
  virtual size_t read(char* out, size_t n) = 0;
};

namespace {

class PlainSource : public LineReader::Source {
 public:
  explicit PlainSource(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    FS_CHECK(f_ != nullptr, "cannot open ", path, ": ", std::strerror(errno));
  }
  ~PlainSource() override { std::fclose(f_); }
  size_t read(char* out, size_t n) override {
    const size_t got = std::fread(out, 1, n, f_);
    FS_CHECK(got > 0 || !std::ferror(f_), "cannot read ", path_, ": ", std::strerror(errno));
    return got;
  }

 private:
  std::string path_;
  FILE* f_;
};

class GzipSource : public LineReader::Source {
 public:
  explicit GzipSource(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    FS_CHECK(f_ != nullptr, "cannot open ", path, ": ", std::strerror(errno));
  }
  ~GzipSource() override { gzclose(f_); }
  size_t read(char* out, size_t n) override {
    const int got = gzread(f_, out, static_cast<unsigned>(n));
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    // A stream cut short reads as Z_BUF_ERROR ("unexpected end of file").
    FS_CHECK(got >= 0 && err == Z_OK, path_, ": corrupt or truncated gzip stream (", msg, ")");
    // zlib passes a file without a gzip header through unchanged.
    FS_CHECK(got == 0 || !gzdirect(f_), path_, ": not a gzip stream");
    return static_cast<size_t>(got);
  }

 private:
  std::string path_;
  gzFile f_;
};

class ZstdSource : public LineReader::Source {
 public:
  explicit ZstdSource(const std::string& path)
      : path_(path), file_(path), in_(ZSTD_DStreamInSize()), stream_(ZSTD_createDStream()) {
    FS_CHECK(stream_ != nullptr, "cannot create a Zstandard stream for ", path);
  }
  ~ZstdSource() override { ZSTD_freeDStream(stream_); }
  size_t read(char* out, size_t n) override {
    ZSTD_outBuffer o{out, n, 0};
    while (o.pos == 0) {
      if (in_pos_.pos == in_pos_.size) {
        const size_t got = file_.read(in_.data(), in_.size());
        if (got == 0) {
          // The end of the file must also be the end of a frame.
          FS_CHECK(frame_done_, path_, ": truncated Zstandard stream");
          return 0;
        }
        in_pos_ = {in_.data(), got, 0};
      }
      const size_t r = ZSTD_decompressStream(stream_, &o, &in_pos_);
      FS_CHECK(!ZSTD_isError(r), path_, ": corrupt Zstandard stream (", ZSTD_getErrorName(r), ")");
      frame_done_ = r == 0;
    }
    return o.pos;
  }

 private:
  std::string path_;
  PlainSource file_;
  std::vector<char> in_;
  ZSTD_inBuffer in_pos_{nullptr, 0, 0};
  ZSTD_DStream* stream_;
  bool frame_done_ = true;
};

}  // namespace

LineReader::LineReader(const std::string& path) : path_(path) {
  if (ends_with(path, ".gz"))
    source_ = std::make_unique<GzipSource>(path);
  else if (ends_with(path, ".zst"))
    source_ = std::make_unique<ZstdSource>(path);
  else
    source_ = std::make_unique<PlainSource>(path);
}

LineReader::~LineReader() = default;

bool LineReader::fill() {
  if (eof_) return false;
  buffer_.erase(0, begin_);
  begin_ = 0;
  const size_t old = buffer_.size();
  buffer_.resize(old + kChunk);
  const size_t got = source_->read(buffer_.data() + old, kChunk);
  buffer_.resize(old + got);
  eof_ = got == 0;
  return got > 0;
}

bool LineReader::next(std::string& line) {
  size_t searched = begin_;
  for (;;) {
    const size_t nl = buffer_.find('\n', searched);
    if (nl != std::string::npos) {
      size_t end = nl;
      if (end > begin_ && buffer_[end - 1] == '\r') --end;
      line.assign(buffer_, begin_, end - begin_);
      begin_ = nl + 1;
      ++line_number_;
      return true;
    }
    searched = buffer_.size() - begin_;
    if (!fill()) break;
    searched = searched + begin_;
  }
  if (begin_ >= buffer_.size()) return false;
  // A last line without '\n'.
  size_t end = buffer_.size();
  if (buffer_[end - 1] == '\r') --end;
  line.assign(buffer_, begin_, end - begin_);
  begin_ = buffer_.size();
  ++line_number_;
  return true;
}

}  // namespace fedshard::data
