// A JSONL corpus file, as `fedshard prepare --input` reads it: the first byte picks plain, .gz or .zst and
// whether records name their sources (--source-key), the rest is the file.
#include "data/prepare.h"
#include "fuzz_input.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kNames[] = {"docs.jsonl", "docs.jsonl.gz", "docs.jsonl.zst"};
  const auto in = fedshard::fuzz::work_dir() / "in";
  std::filesystem::remove_all(in);
  std::filesystem::create_directories(in);
  fedshard::data::PrepareOptions opts;
  opts.inputs = {fedshard::fuzz::write_input(std::string("in/") + kNames[data[0] % 3], data + 1, size - 1)};
  opts.out = (fedshard::fuzz::work_dir() / "out").string();
  opts.val_fraction = 0.5;
  if (data[0] & 4) opts.source_key = "src";
  try {
    fedshard::data::prepare_corpus(opts);
  } catch (const fedshard::Error&) {
  }
  return 0;
}
