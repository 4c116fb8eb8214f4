// A prepared corpus's manifest.json, as `fedshard train --data DIR` loads it.
#include "data/manifest.h"
#include "fuzz_input.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = fedshard::fuzz::work_dir() / "corpus";
  std::filesystem::create_directories(dir);
  fedshard::fuzz::write_input("corpus/manifest.json", data, size);
  try {
    fedshard::data::Manifest::load(dir.string());
  } catch (const fedshard::Error&) {
  }
  return 0;
}
