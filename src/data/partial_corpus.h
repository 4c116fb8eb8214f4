// OUT.partial: where prepare builds the corpus OUT. It is locked while a prepare runs (a second one on the
// same OUT is refused) and holds progress.json, rewritten after every finished shard: the options the output
// depends on and each shard sequence's progress. An error removes it; a killed prepare leaves it, finished
// shards and all, for `prepare --resume`, which goes on from there when the options are the same.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "data/shard_sequence.h"

namespace fedshard::data {

class PartialCorpus {
 public:
  // Without resume, or with nothing to resume, starts empty. With resume, an OUT.partial made with other
  // options is refused, naming what differs.
  PartialCorpus(const std::string& out, bool resume, const std::string& options);
  ~PartialCorpus();  // removes the directory unless installed
  PartialCorpus(const PartialCorpus&) = delete;
  PartialCorpus& operator=(const PartialCorpus&) = delete;

  const std::string& path() const { return path_; }
  // The saved progress of a sequence ("train", "web"): empty when there is none.
  SequenceProgress resumed(const std::string& split, const std::string& source) const;
  int64_t resumed_shards() const;
  // Writes progress.json (atomically) with every sequence's progress, by split and source.
  void save(const std::map<std::pair<std::string, std::string>, const SequenceProgress*>& sequences) const;
  // Moves the finished corpus onto OUT (an existing corpus there is replaced only after the swap).
  void install();

 private:
  std::string out_, path_, options_;
  int lock_ = -1;
  std::map<std::pair<std::string, std::string>, SequenceProgress> resumed_;
};

}  // namespace fedshard::data
