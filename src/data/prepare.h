// `fedshard prepare`: text files -> token shards + manifest.json, with a held-out validation split.
//
// Each input DIR with subdirectories holds one source per subdirectory (labelled by its name; its files,
// recursively, are the documents); an input without subdirectories is one source labelled by its basename.
// Hidden files and directories (".name") are skipped. Documents are encoded and followed by EOS. The train/val
// split is by document, per source, and depends only on the seed and the source's label and files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"

namespace fedshard::data {

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string out;
  std::string tokenizer = "bytes";
  double val_fraction = 0.05;
  uint64_t seed = 0;
  int64_t max_shard_tokens = 64 << 20;
};

struct PrepareSummary {
  Manifest manifest;
  double seconds = 0;
};

// Writes OUT atomically: built in OUT.tmp-XXXXXX, swapped in only when complete. An existing OUT is replaced
// only if it is a prepared corpus (holds manifest.json). Bad input is a fedshard::Error naming the file or dir.
PrepareSummary prepare_corpus(const PrepareOptions& opts);

}  // namespace fedshard::data
