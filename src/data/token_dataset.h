// Training windows over the token shards of one split of a prepared corpus.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/shard_file.h"

namespace fedshard::data {

class TokenDataset {
 public:
  // Opens every shard of `split` listed in dir/manifest.json (mmap) and validates it against the manifest
  // and model_vocab (0 = don't check model). Windows: within each shard, window i covers tokens
  // [i*seq_len, i*seq_len + seq_len + 1); a shard of n tokens has (n-1)/seq_len windows; window ids are
  // global, shard by shard in manifest order. Windows never cross shards, so every one is seq_len+1 real tokens.
  TokenDataset(const std::string& dir, const std::string& split, int64_t seq_len, int64_t model_vocab);

  const Manifest& manifest() const { return manifest_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t num_windows() const { return window_begin_.back(); }
  int source_of(int64_t window) const;  // index into manifest().sources
  at::Tensor batch(const std::vector<int64_t>& windows) const;  // int64 [B, seq_len+1]

 private:
  size_t shard_of(int64_t window) const;

  Manifest manifest_;
  int64_t seq_len_;
  std::vector<ShardFile> shards_;
  std::vector<int> shard_source_;
  std::vector<int64_t> window_begin_;  // first global window id of each shard, then the total
};

}  // namespace fedshard::data
