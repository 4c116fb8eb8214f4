// Safetensors files (Hugging Face weights, checkpoint rank files): the header's sizes, offsets and dtypes, then
// every tensor and a slice of it read back.
#include "fuzz_input.h"
#include "util/error.h"
#include "util/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fedshard::fuzz::write_input("model.safetensors", data, size);
  try {
    const fedshard::SafetensorsFile f(path);
    for (const auto& [name, e] : f.entries()) {
      const auto t = f.tensor(name);
      if (t.numel() > 1) f.read_range(name, 1, t.numel() - 1);
    }
  } catch (const fedshard::Error&) {
  }
  return 0;
}
