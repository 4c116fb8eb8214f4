// A checkpoint's meta.json, as `--resume` and `fedshard eval/export` read it, against the `tiny` model; the rank
// file it names is a small valid one, so the fuzzer reaches the checks past the metadata.
#include "fuzz_input.h"
#include "model/config.h"
#include "train/checkpoint.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fedshard::model::ModelConfig model = [] {
    auto m = fedshard::model::preset("tiny");
    m.vocab_size = 258;
    return m;
  }();
  const auto dir = fedshard::fuzz::work_dir() / "step-00000001";
  std::filesystem::create_directories(dir);
  fedshard::fuzz::write_input("step-00000001/meta.json", data, size);
  std::ofstream(dir / "rank-00000.safetensors", std::ios::trunc) << std::string("\x02\0\0\0\0\0\0\0{}", 10);
  try {
    const auto meta = fedshard::train::load_checkpoint_meta(dir.string(), model, /*verify_all_files=*/true, 0);
    fedshard::train::checkpoint_model(dir.string());
    (void)meta;
  } catch (const fedshard::Error&) {
  }
  return 0;
}
