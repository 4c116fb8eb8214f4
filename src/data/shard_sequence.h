// The shards of one (split, source) of a prepared corpus: split-source-000.bin, -001, ... Documents start a new
// shard when they would overflow the current one; only a document longer than max_tokens is cut across shards.
// Each shard is finished by a rename (ShardWriter); after each, on_shard runs with progress() up to date, so a
// stopped prepare can resume: a sequence built from a saved progress skips the documents its finished shards
// hold and the head of a document they hold in part, and goes on writing the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/shard_file.h"
#include "data/tokenizer.h"

namespace fedshard::data {

struct SequenceProgress {
  std::vector<ShardEntry> finished;
  int64_t documents = 0;  // documents whose EOS lies in a finished shard
  uint64_t carry = 0;     // tokens of the next document already in a finished shard (a document cut across)
};

class ShardSequence {
 public:
  ShardSequence(std::string dir, std::string split, std::string source, const Tokenizer& tok, int64_t max_tokens,
                SequenceProgress resumed, std::function<void()> on_shard);

  // True for a document the finished shards of a resumed sequence already hold: it need not be encoded.
  bool skip_document();
  // Appends a document's tokens (with its EOS), first dropping those a finished shard already holds.
  void add_document(std::vector<uint32_t>& tokens);
  std::vector<ShardEntry> finish();  // closes the open shard; every shard's entry
  const SequenceProgress& progress() const { return progress_; }

 private:
  void open_shard();
  void close_shard(uint64_t carry);

  std::string dir_, split_, source_;
  const Tokenizer& tok_;
  uint64_t max_tokens_;
  std::function<void()> on_shard_;
  SequenceProgress progress_;
  int64_t to_skip_ = 0;     // documents still to skip (resume)
  uint64_t to_drop_ = 0;    // tokens of the next document to drop (resume)
  std::unique_ptr<ShardWriter> writer_;
  std::string file_;
  int64_t documents_ = 0;  // ended in the open shard
};

}  // namespace fedshard::data
