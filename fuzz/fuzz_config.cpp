// A training config (TOML), with the checks `fedshard train --config FILE` runs on it before any rank starts.
#include "fuzz_input.h"
#include "train/config.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fedshard::fuzz::write_input("train.toml", data, size);
  try {
    fedshard::train::load_config(path, {});
  } catch (const fedshard::Error&) {
  }
  return 0;
}
