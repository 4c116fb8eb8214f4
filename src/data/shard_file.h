// Token shard files: a fixed 48-byte little-endian header, then the tokens as uint32 (documents end with EOS).
//   offset  0  magic "FSTOKENS"        offset 24  u64 token count
//   offset  8  u32 format version (1)  offset 32  u64 tokenizer fingerprint
//   offset 12  u32 tokenizer kind      offset 40  u64 FNV-1a 64 of the token bytes
//   offset 16  u32 vocab size
//   offset 20  u32 header size (48)
// Writers never leave a half-written shard; readers map the file and check it against what the caller expects
// (manifest, model) before handing out a single token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "util/posix_file.h"

namespace fedshard::data {

inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kShardHeaderBytes = 48;

std::string tokenizer_kind_name(TokenizerKind kind);  // "bytes", "tiktoken", "hf", "sentencepiece"

struct ShardHeader {
  TokenizerKind kind = TokenizerKind::Bytes;
  uint32_t vocab_size = 0;
  uint64_t tokens = 0;
  uint64_t fingerprint = 0;
  uint64_t checksum = 0;
};

// Streams tokens into PATH.tmp; finish() writes the header, fsyncs and renames onto PATH. A writer destroyed
// before finish() removes its temporary file.
class ShardWriter {
 public:
  ShardWriter(std::string path, TokenizerKind kind, uint32_t vocab_size, uint64_t fingerprint);
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();

  void append(const uint32_t* tokens, size_t count);
  uint64_t size() const { return header_.tokens; }
  ShardHeader finish();

 private:
  void flush();

  std::string path_;
  std::string tmp_path_;
  UniqueFd file_;
  ShardHeader header_;
  std::vector<uint32_t> buffer_;
  bool finished_ = false;
};

// What a shard must agree with: the manifest (tokenizer and the shard's entry) and, if nonzero, the model vocab
// (at least the tokenizer's: rows beyond it are padding).
struct ShardExpectation {
  TokenizerKind kind = TokenizerKind::Bytes;
  uint32_t vocab_size = 0;
  uint64_t fingerprint = 0;
  uint64_t tokens = 0;
  uint64_t checksum = 0;
  uint32_t model_vocab = 0;
};

// A validated shard, mapped read-only. Any disagreement is a fedshard::Error "PATH: what disagrees".
class ShardFile {
 public:
  ShardFile(const std::string& path, const ShardExpectation& expect);
  ShardFile(ShardFile&& o) noexcept;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  ShardFile& operator=(ShardFile&&) = delete;
  ~ShardFile();

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  const uint32_t* tokens() const { return tokens_; }
  int64_t size() const { return static_cast<int64_t>(header_.tokens); }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  ShardHeader header_;
  const uint32_t* tokens_ = nullptr;
};

}  // namespace fedshard::data
