// manifest.json of a prepared corpus: the tokenizer, the train/val split, every shard with its checksum, and a
// unigram perplexity baseline. Readers trust shards only after checking them against this file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace fedshard::data {

struct TokenizerInfo {
  std::string spec;  // what make_tokenizer was given
  TokenizerKind kind = TokenizerKind::Bytes;
  uint32_t vocab_size = 0;
  uint32_t bos = 0;
  uint32_t eos = 0;
  uint64_t fingerprint = 0;
};

struct ShardEntry {
  std::string file;    // name inside the corpus directory
  std::string split;   // "train" | "val"
  std::string source;  // one of Manifest::sources
  int64_t tokens = 0;
  int64_t documents = 0;  // documents whose EOS lies in this shard
  uint64_t checksum = 0;
};

struct SplitTotals {
  int64_t shards = 0;
  int64_t documents = 0;
  int64_t tokens = 0;
};

struct Manifest {
  static constexpr const char* kFileName = "manifest.json";
  static constexpr const char* kFormat = "fedshard-token-shards";
  static constexpr int kVersion = 1;

  TokenizerInfo tokenizer;
  uint64_t seed = 0;
  double val_fraction = 0;
  std::vector<std::string> sources;  // sorted, unique
  std::vector<ShardEntry> shards;    // train shards, then val; within a split by source, then part
  // Perplexity of the val split under an add-one-smoothed unigram model of the train split; none without val.
  std::optional<double> unigram_val_ppl;

  SplitTotals totals(const std::string& split) const;

  void save(const std::string& dir) const;  // atomically
  // Validates structure and consistency; each problem is a fedshard::Error naming DIR/manifest.json.
  static Manifest load(const std::string& dir);
};

}  // namespace fedshard::data
