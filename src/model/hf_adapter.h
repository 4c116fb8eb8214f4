// The only place that knows Hugging Face Llama names and config.json (torchtitan's state_dict_adapter).
// fedshard's parameters use Meta's names and the rotate-half RoPE layout HF checkpoints use, so conversion is
// a renaming; no q/k permutation is needed in either direction.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/config.h"

namespace fedshard::model {

// "layers.3.attention.wq.weight" -> "model.layers.3.self_attn.q_proj.weight", and back. Throws
// fedshard::Error for a name the other side has no counterpart for.
std::string to_hf_name(const std::string& name);
std::string from_hf_name(const std::string& hf_name);

// Special token ids of a config.json or generation_config.json (eos may be a list: Llama 3.1 instruct stops on
// three). Empty when absent.
struct HfTokenIds {
  std::vector<int64_t> bos, eos;
};

// HF LlamaForCausalLM config.json for `cfg` with weights stored as `dtype` ("float32" | "bfloat16" |
// "float16"). rope_theta/rope_scaling are written in the form transformers 4 and 5 both read.
nlohmann::json hf_config(const ModelConfig& cfg, const std::string& dtype, const HfTokenIds& ids);
// generation_config.json: the ids `generate()` starts and stops with.
nlohmann::json hf_generation_config(const HfTokenIds& ids);

// The model an HF config.json (read from `path`) describes, named `name`. Every architectural key is either
// supported or refused: throws fedshard::Error "PATH: KEY ..." naming the key (model_type other than llama,
// biases, hidden_act other than silu, head_dim other than hidden_size / num_attention_heads, rope types other
// than default and llama3, dropout, quantization).
ModelConfig model_from_hf_config(const nlohmann::json& hf, const std::string& path, const std::string& name);
HfTokenIds hf_token_ids(const nlohmann::json& config);

}  // namespace fedshard::model
