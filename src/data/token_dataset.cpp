#include "data/token_dataset.h"

#include <algorithm>
#include <filesystem>

#include "util/error.h"

namespace fedshard::data {

TokenDataset::TokenDataset(const std::string& dir, const std::string& split, int64_t seq_len, int64_t model_vocab)
    : manifest_(Manifest::load(dir)), seq_len_(seq_len) {
  FS_CHECK(split == "train" || split == "val", "unknown split \"", split, "\" (expected train or val)");
  FS_CHECK(seq_len >= 1, "sequence length must be positive, got ", seq_len);
  FS_CHECK(model_vocab >= 0 && model_vocab <= UINT32_MAX, "model vocab ", model_vocab, " out of range");
  const TokenizerInfo& tok = manifest_.tokenizer;
  window_begin_.push_back(0);
  int64_t tokens = 0;
  for (const auto& entry : manifest_.shards) {
    if (entry.split != split) continue;
    ShardExpectation expect;
    expect.kind = tok.kind;
    expect.vocab_size = tok.vocab_size;
    expect.fingerprint = tok.fingerprint;
    expect.tokens = static_cast<uint64_t>(entry.tokens);
    expect.checksum = entry.checksum;
    expect.model_vocab = static_cast<uint32_t>(model_vocab);
    shards_.emplace_back((std::filesystem::path(dir) / entry.file).string(), expect);
    const auto& sources = manifest_.sources;
    shard_source_.push_back(
        static_cast<int>(std::lower_bound(sources.begin(), sources.end(), entry.source) - sources.begin()));
    window_begin_.push_back(window_begin_.back() + std::max<int64_t>(entry.tokens - 1, 0) / seq_len);
    tokens += entry.tokens;
  }
  if (num_windows() > 0) return;
  FS_CHECK(tokens >= seq_len + 1, split, " split of ", dir, " has ", tokens,
           " tokens: fewer than one window of seq_len+1 = ", seq_len + 1);
  throw Error(cat(split, " split of ", dir, " has ", tokens, " tokens, but none of its ", shards_.size(),
                  " shards holds a window of seq_len+1 = ", seq_len + 1));
}

size_t TokenDataset::shard_of(int64_t window) const {
  FS_ASSERT(window >= 0 && window < num_windows(), "window ", window, " of ", num_windows());
  return static_cast<size_t>(std::upper_bound(window_begin_.begin(), window_begin_.end(), window) -
                             window_begin_.begin() - 1);
}

int TokenDataset::source_of(int64_t window) const { return shard_source_[shard_of(window)]; }

at::Tensor TokenDataset::batch(const std::vector<int64_t>& windows) const {
  const int64_t width = seq_len_ + 1;
  at::Tensor out = at::empty({static_cast<int64_t>(windows.size()), width}, at::kLong);
  int64_t* dst = out.data_ptr<int64_t>();
  for (int64_t w : windows) {
    const size_t s = shard_of(w);
    const uint32_t* src = shards_[s].tokens() + (w - window_begin_[s]) * seq_len_;
    std::copy(src, src + width, dst);
    dst += width;
  }
  return out;
}

}  // namespace fedshard::data
