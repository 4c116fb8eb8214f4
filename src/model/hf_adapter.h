// The only place that knows Hugging Face Llama names and config.json (torchtitan's state_dict_adapter).
// fedshard's parameters use Meta's names and the rotate-half RoPE layout HF checkpoints use, so conversion is
// a renaming; no q/k permutation is needed in either direction.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "model/config.h"

namespace fedshard::model {

// "layers.3.attention.wq.weight" -> "model.layers.3.self_attn.q_proj.weight", and back. Throws
// fedshard::Error for a name the other side has no counterpart for.
std::string to_hf_name(const std::string& name);
std::string from_hf_name(const std::string& hf_name);

// HF LlamaForCausalLM config.json for `cfg` with weights stored as `torch_dtype` ("float32" | "bfloat16").
nlohmann::json hf_config(const ModelConfig& cfg, const std::string& torch_dtype);

// Checks that an HF config.json describes the same architecture as `cfg`; throws fedshard::Error naming the
// first field that differs.
void check_hf_config(const nlohmann::json& hf, const ModelConfig& cfg, const std::string& where);

}  // namespace fedshard::model
