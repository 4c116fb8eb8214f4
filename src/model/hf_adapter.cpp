#include "model/hf_adapter.h"

#include <cmath>
#include <regex>
#include <utility>
#include <vector>

#include "util/error.h"

namespace fedshard::model {

namespace {

// Per-layer suffixes: Meta name (after "layers.N.") <-> HF name (after "model.layers.N.").
const std::vector<std::pair<std::string, std::string>>& layer_names() {
  static const std::vector<std::pair<std::string, std::string>> n = {
      {"attention_norm.weight", "input_layernorm.weight"},
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
      {"feed_forward.w2.weight", "mlp.down_proj.weight"},
      {"feed_forward.w3.weight", "mlp.up_proj.weight"},
  };
  return n;
}

const std::vector<std::pair<std::string, std::string>>& top_names() {
  static const std::vector<std::pair<std::string, std::string>> n = {
      {"tok_embeddings.weight", "model.embed_tokens.weight"},
      {"norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  return n;
}

}  // namespace

std::string to_hf_name(const std::string& name) {
  for (const auto& [meta, hf] : top_names())
    if (name == meta) return hf;
  static const std::regex layer(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(name, m, layer))
    for (const auto& [meta, hf] : layer_names())
      if (m[2] == meta) return "model.layers." + m[1].str() + "." + hf;
  throw Error(cat("no Hugging Face name for parameter '", name, "'"));
}

std::string from_hf_name(const std::string& hf_name) {
  for (const auto& [meta, hf] : top_names())
    if (hf_name == hf) return meta;
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(hf_name, m, layer))
    for (const auto& [meta, hf] : layer_names())
      if (m[2] == hf) return "layers." + m[1].str() + "." + meta;
  throw Error(cat("unknown Hugging Face Llama tensor '", hf_name, "'"));
}

nlohmann::json hf_config(const ModelConfig& c, const std::string& torch_dtype) {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"hidden_size", c.dim},
                      {"intermediate_size", c.ffn_hidden_dim()},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"head_dim", c.head_dim()},
                      {"vocab_size", c.vocab_size},
                      {"max_position_embeddings", c.max_seq_len},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"hidden_act", "silu"},
                      {"attention_bias", false},
                      {"mlp_bias", false},
                      {"torch_dtype", torch_dtype}};
  if (c.rope_scaling)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling->factor},
                         {"low_freq_factor", c.rope_scaling->low_freq_factor},
                         {"high_freq_factor", c.rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling->original_max_position}};
  else
    j["rope_scaling"] = nullptr;
  return j;
}

void check_hf_config(const nlohmann::json& hf, const ModelConfig& c, const std::string& where) {
  auto expect = [&](const char* key, double want) {
    FS_CHECK(hf.contains(key) && hf[key].is_number(), where, ": config.json has no numeric '", key, "'");
    const double got = hf[key].get<double>();
    FS_CHECK(std::abs(got - want) <= 1e-9 * std::max(1.0, std::abs(want)), where, ": config.json ", key, " = ", got,
             " but model ", c.name, " has ", want);
  };
  expect("hidden_size", static_cast<double>(c.dim));
  expect("intermediate_size", static_cast<double>(c.ffn_hidden_dim()));
  expect("num_hidden_layers", static_cast<double>(c.n_layers));
  expect("num_attention_heads", static_cast<double>(c.n_heads));
  expect("num_key_value_heads", static_cast<double>(c.n_kv_heads));
  expect("vocab_size", static_cast<double>(c.vocab_size));
  expect("rope_theta", c.rope_theta);
  expect("rms_norm_eps", c.norm_eps);
  const bool tied = hf.value("tie_word_embeddings", false);
  FS_CHECK(tied == c.tie_embeddings, where, ": config.json tie_word_embeddings = ", tied, " but model ", c.name,
           " has ", c.tie_embeddings);
}

}  // namespace fedshard::model
