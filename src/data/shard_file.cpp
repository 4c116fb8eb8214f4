#include "data/shard_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "util/error.h"
#include "util/fnv1a.h"
#include "util/hex.h"

namespace fedshard::data {
namespace {

// Tokens are used in place from the mapping and written straight from memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian");

constexpr char kMagic[8] = {'F', 'S', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr size_t kWriteBufferTokens = 1 << 18;

template <class T>
void put(unsigned char* header, size_t offset, T v) {
  std::memcpy(header + offset, &v, sizeof v);
}

template <class T>
T get(const unsigned char* header, size_t offset) {
  T v;
  std::memcpy(&v, header + offset, sizeof v);
  return v;
}

}  // namespace

std::string tokenizer_kind_name(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::Bytes: return "bytes";
    case TokenizerKind::Tiktoken: return "tiktoken";
    case TokenizerKind::HuggingFace: return "hf";
    case TokenizerKind::SentencePiece: return "sentencepiece";
  }
  return cat("unknown(", static_cast<uint32_t>(kind), ")");
}

ShardWriter::ShardWriter(std::string path, TokenizerKind kind, uint32_t vocab_size, uint64_t fingerprint)
    : path_(std::move(path)),
      tmp_path_(path_ + ".tmp"),
      file_(open_file(tmp_path_, O_WRONLY | O_CREAT | O_TRUNC)) {
  header_.kind = kind;
  header_.vocab_size = vocab_size;
  header_.fingerprint = fingerprint;
  header_.checksum = kFnv1aOffset;
  buffer_.reserve(kWriteBufferTokens);
  // Room for the header, filled in by finish() once count and checksum are known.
  const unsigned char zeros[kShardHeaderBytes] = {};
  write_all(file_, zeros, sizeof zeros);
}

ShardWriter::~ShardWriter() {
  if (!finished_) ::unlink(tmp_path_.c_str());
}

void ShardWriter::append(const uint32_t* tokens, size_t count) {
  header_.checksum = fnv1a64(tokens, count * sizeof(uint32_t), header_.checksum);
  header_.tokens += count;
  while (count > 0) {
    const size_t n = std::min(count, kWriteBufferTokens - buffer_.size());
    buffer_.insert(buffer_.end(), tokens, tokens + n);
    tokens += n;
    count -= n;
    if (buffer_.size() == kWriteBufferTokens) flush();
  }
}

void ShardWriter::flush() {
  write_all(file_, buffer_.data(), buffer_.size() * sizeof(uint32_t));
  buffer_.clear();
}

ShardHeader ShardWriter::finish() {
  FS_ASSERT(!finished_, "finish() called twice on ", path_);
  flush();
  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  put<uint32_t>(header, 8, kShardVersion);
  put<uint32_t>(header, 12, static_cast<uint32_t>(header_.kind));
  put<uint32_t>(header, 16, header_.vocab_size);
  put<uint32_t>(header, 20, kShardHeaderBytes);
  put<uint64_t>(header, 24, header_.tokens);
  put<uint64_t>(header, 32, header_.fingerprint);
  put<uint64_t>(header, 40, header_.checksum);
  write_all_at(file_, header, sizeof header, 0);
  sync_file(file_);
  file_.close();
  rename_file(tmp_path_, path_);
  finished_ = true;
  return header_;
}

ShardFile::ShardFile(const std::string& path, const ShardExpectation& expect) : path_(path) {
  UniqueFd f = open_file(path, O_RDONLY);
  struct stat st;
  FS_CHECK(::fstat(f.get(), &st) == 0, "cannot stat ", path, ": ", std::strerror(errno));
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  FS_CHECK(file_bytes >= kShardHeaderBytes, path, ": ", file_bytes, " bytes is too short for a token shard header (",
           kShardHeaderBytes, " bytes)");
  map_bytes_ = file_bytes;
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, f.get(), 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(cat("cannot map ", path, ": ", std::strerror(errno)));
  }
  try {
    f.close();  // the mapping keeps the file
    const auto* h = static_cast<const unsigned char*>(map_);
    FS_CHECK(std::memcmp(h, kMagic, sizeof kMagic) == 0, path, ": not a fedshard token shard (bad magic)");
    const auto version = get<uint32_t>(h, 8);
    FS_CHECK(version == kShardVersion, path, ": shard format version ", version, ", this build reads version ",
             kShardVersion);
    const auto header_bytes = get<uint32_t>(h, 20);
    FS_CHECK(header_bytes == kShardHeaderBytes, path, ": header size ", header_bytes, " but format version ",
             kShardVersion, " has ", kShardHeaderBytes);
    header_.kind = static_cast<TokenizerKind>(get<uint32_t>(h, 12));
    header_.vocab_size = get<uint32_t>(h, 16);
    header_.tokens = get<uint64_t>(h, 24);
    header_.fingerprint = get<uint64_t>(h, 32);
    header_.checksum = get<uint64_t>(h, 40);

    const uint64_t payload = file_bytes - kShardHeaderBytes;
    FS_CHECK(payload / 4 >= header_.tokens, path, ": truncated: ", payload / 4, " tokens in file, header says ",
             header_.tokens);
    FS_CHECK(payload == 4 * header_.tokens, path, ": ", payload - 4 * header_.tokens,
             " bytes after the last token the header counts (", header_.tokens, " tokens)");

    FS_CHECK(header_.kind == expect.kind, path, ": tokenizer ", tokenizer_kind_name(header_.kind),
             " but manifest says ", tokenizer_kind_name(expect.kind));
    FS_CHECK(header_.vocab_size == expect.vocab_size, path, ": vocab ", header_.vocab_size, " but manifest says ",
             expect.vocab_size);
    FS_CHECK(header_.fingerprint == expect.fingerprint, path, ": tokenizer fingerprint ", hex64(header_.fingerprint),
             " but manifest says ", hex64(expect.fingerprint));
    FS_CHECK(header_.tokens == expect.tokens, path, ": ", header_.tokens, " tokens but manifest says ",
             expect.tokens);
    FS_CHECK(header_.checksum == expect.checksum, path, ": checksum ", hex64(header_.checksum),
             " but manifest says ", hex64(expect.checksum));
    FS_CHECK(expect.model_vocab == 0 || header_.vocab_size <= expect.model_vocab, path, ": vocab ",
             header_.vocab_size, " but model vocab is only ", expect.model_vocab);

    tokens_ = reinterpret_cast<const uint32_t*>(h + kShardHeaderBytes);
    const uint64_t checksum = fnv1a64(tokens_, payload);
    FS_CHECK(checksum == header_.checksum, path, ": corrupt token data: checksum ", hex64(checksum),
             ", header says ", hex64(header_.checksum));
    const uint32_t* end = tokens_ + header_.tokens;
    const uint32_t* bad = std::find_if(tokens_, end, [&](uint32_t t) { return t >= header_.vocab_size; });
    FS_CHECK(bad == end, path, ": token ", *bad, " at position ", bad - tokens_, " is outside vocab ",
             header_.vocab_size);
  } catch (...) {
    ::munmap(map_, map_bytes_);
    throw;
  }
}

ShardFile::ShardFile(ShardFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(o.map_bytes_),
      header_(o.header_),
      tokens_(std::exchange(o.tokens_, nullptr)) {}

ShardFile::~ShardFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);  // only fails for an invalid range, which a mapping is not
}

}  // namespace fedshard::data
