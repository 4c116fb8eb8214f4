#include "data/shard_sequence.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "util/error.h"

namespace fedshard::data {

ShardSequence::ShardSequence(std::string dir, std::string split, std::string source, const Tokenizer& tok,
                             int64_t max_tokens, SequenceProgress resumed, std::function<void()> on_shard)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      source_(std::move(source)),
      tok_(tok),
      max_tokens_(static_cast<uint64_t>(max_tokens)),
      on_shard_(std::move(on_shard)),
      progress_(std::move(resumed)),
      to_skip_(progress_.documents),
      to_drop_(progress_.carry) {}

bool ShardSequence::skip_document() {
  if (to_skip_ == 0) return false;
  --to_skip_;
  return true;
}

void ShardSequence::add_document(std::vector<uint32_t>& tokens) {
  const uint64_t dropped = to_drop_;
  if (dropped > 0) {
    FS_CHECK(dropped < tokens.size(), "resuming ", split_, "-", source_, ": the document cut across shards has ",
             tokens.size(), " tokens now, not more than the ", dropped, " already written (did the input change?)");
    tokens.erase(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(dropped));
    to_drop_ = 0;
  }
  if (writer_ && writer_->size() + tokens.size() > max_tokens_) close_shard(0);
  for (size_t done = 0; done < tokens.size();) {
    if (!writer_) open_shard();
    const size_t n = std::min<uint64_t>(tokens.size() - done, max_tokens_ - writer_->size());
    writer_->append(tokens.data() + done, n);
    done += n;
    if (writer_->size() == max_tokens_ && done < tokens.size()) close_shard(dropped + done);
  }
  ++documents_;
}

std::vector<ShardEntry> ShardSequence::finish() {
  if (writer_) close_shard(0);
  return progress_.finished;
}

void ShardSequence::open_shard() {
  char part[16];
  std::snprintf(part, sizeof part, "%03zu", progress_.finished.size());
  file_ = split_ + "-" + source_ + "-" + part + ".bin";
  writer_ = std::make_unique<ShardWriter>((std::filesystem::path(dir_) / file_).string(), tok_.kind(),
                                          tok_.vocab_size(), tok_.fingerprint());
}

void ShardSequence::close_shard(uint64_t carry) {
  const ShardHeader h = writer_->finish();
  writer_.reset();
  progress_.finished.push_back({file_, split_, source_, static_cast<int64_t>(h.tokens), documents_, h.checksum});
  progress_.documents += documents_;
  progress_.carry = carry;
  documents_ = 0;
  on_shard_();
}

}  // namespace fedshard::data
