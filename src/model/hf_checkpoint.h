// A Hugging Face Llama directory on disk: config.json (+ generation_config.json) and the weights, either one
// model.safetensors or shards named by model.safetensors.index.json ("weight_map": tensor -> file). Reading
// validates the whole directory up front (headers only) and then streams any element range of any parameter;
// writing cuts the tensors into shards of at most max_shard_bytes, as save_pretrained does.
#pragma once

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/hf_adapter.h"
#include "util/safetensors.h"

namespace fedshard::model {

// True when DIR has a config.json and model.safetensors or model.safetensors.index.json.
bool is_hf_dir(const std::string& dir);

class HfCheckpoint {
 public:
  // Reads config.json into the model it describes (model_from_hf_config) and every shard's header, and
  // checks that the weights are exactly that model's: each parameter once, in the file the index names, with
  // its shape and a float dtype (F32, F16, BF16, F64); no other tensor (biases are refused by name). Throws
  // fedshard::Error naming the file and the tensor or key.
  explicit HfCheckpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return cfg_; }
  const HfTokenIds& token_ids() const { return ids_; }
  std::string config_path() const;
  // Elements [begin, begin + dst.numel()) of the flattened parameter `name` (fedshard's name) into `dst`,
  // converted to its dtype. Reads only those bytes.
  void read(const std::string& name, int64_t begin, at::Tensor dst) const;

 private:
  struct Location {
    const SafetensorsFile* file;
    std::string hf_name;
  };
  std::string dir_;
  ModelConfig cfg_;
  HfTokenIds ids_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location> where_;  // by fedshard parameter name
};

// Writes the parameters of `cfg` as an HF Llama directory: `config` as config.json, `generation_config`, and
// model.safetensors, or model-0000k-of-0000n.safetensors and the index when they exceed max_shard_bytes.
// `fetch` gives one parameter (fedshard name) in full; tensors are fetched and cast to `dtype` ("float32" |
// "bfloat16" | "float16") one shard at a time. Each file is written atomically; weight files of an earlier
// export into DIR that this one does not rewrite are removed. Returns the weight files written.
std::vector<std::string> write_hf_checkpoint(const std::string& dir, const ModelConfig& cfg,
                                             const std::function<at::Tensor(const std::string&)>& fetch,
                                             const std::string& dtype, int64_t max_shard_bytes,
                                             const nlohmann::json& config, const nlohmann::json& generation_config);

}  // namespace fedshard::model
