// A Hugging Face directory's config.json and model.safetensors.index.json: the input is one of them (its first
// byte says which), the other a valid one, as `fedshard eval/train --init-from DIR` reads them.
#include "fuzz_input.h"
#include "model/hf_checkpoint.h"
#include "util/error.h"

namespace {

const char* kConfig = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 258,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu",
  "tie_word_embeddings": true, "torch_dtype": "float32"})";
const char* kIndex = R"({"metadata": {"total_size": 0}, "weight_map": {"model.embed_tokens.weight": "a.safetensors"}})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool index = data[0] & 1;
  const auto dir = fedshard::fuzz::work_dir() / "hf";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "model.safetensors.index.json");
  const auto write = [&](const char* name, const std::string& text) {
    std::ofstream(dir / name, std::ios::trunc) << text;
  };
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  write("config.json", index ? kConfig : input);
  write("model.safetensors.index.json", index ? input : kIndex);
  try {
    fedshard::model::HfCheckpoint hf(dir.string());
  } catch (const fedshard::Error&) {
  }
  return 0;
}
