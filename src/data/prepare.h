// `fedshard prepare`: text, JSONL and Parquet files -> token shards + manifest.json, with a held-out validation split.
//
// Each input DIR with subdirectories holds one source per subdirectory (labelled by its name; its files,
// recursively, are the documents); an input without subdirectories is one source labelled by its basename.
// Inputs may also be files and glob patterns: the files of one parent directory form the source labelled by
// that directory's name. Hidden files and directories (".name") are skipped. A file is one document, except
// *.jsonl, *.jsonl.gz and *.jsonl.zst: one document per line, the JSON object's `text_key` string (blank lines
// skipped), and *.parquet: one document per row, the `text_key` column; with `source_key` every record's source
// is that key's (column's) string instead of its directory. Documents are encoded and followed by EOS. The
// train/val split depends only on the seed and each document's source label and place: per source, a fixed
// share of its text files (at least one where it has two); per JSONL or Parquet record, a draw seeded by the
// source, the file's path within its source directory and the line (row) number.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "util/faults.h"

namespace fedshard::data {

struct PrepareOptions {
  std::vector<std::string> inputs;
  std::string out;
  std::string tokenizer = "bytes";
  std::string text_key = "text";  // also the Parquet column
  std::string source_key;         // empty: sources are directories
  double val_fraction = 0.05;
  uint64_t seed = 0;
  int64_t max_shard_tokens = 64 << 20;
  int workers = 0;  // threads encoding documents; 0: the cores. The output is the same for any number.
  bool resume = false;  // go on from OUT.partial (a killed prepare's finished shards), if its options are these
  const Faults* faults = &Faults::none();  // the robustness tests' plan: FaultPoint::Shard, after each finished shard
};

struct PrepareSummary {
  Manifest manifest;
  double seconds = 0;
  int workers = 1;
  int64_t resumed_shards = 0;                   // finished shards a --resume kept
  std::map<std::string, uint64_t> text_bytes;  // by source: the bytes of text read
};

// Writes OUT atomically: built in OUT.partial (partial_corpus.h), swapped in only when complete. An existing OUT
// is replaced only if it is a prepared corpus (holds manifest.json). Bad input is a fedshard::Error naming the
// file or dir.
PrepareSummary prepare_corpus(const PrepareOptions& opts);

}  // namespace fedshard::data
