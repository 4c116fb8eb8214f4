#include "model/hf_adapter.h"

#include <cmath>
#include <optional>
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

namespace {

nlohmann::json ids_json(const std::vector<int64_t>& ids) {
  if (ids.empty()) return nullptr;
  return ids.size() == 1 ? nlohmann::json(ids[0]) : nlohmann::json(ids);
}

}  // namespace

nlohmann::json hf_config(const ModelConfig& c, const std::string& dtype, const HfTokenIds& ids) {
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
                      {"bos_token_id", ids_json(ids.bos)},
                      {"eos_token_id", ids_json(ids.eos)},
                      // transformers 4 reads torch_dtype, 5 reads dtype.
                      {"torch_dtype", dtype},
                      {"dtype", dtype}};
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

nlohmann::json hf_generation_config(const HfTokenIds& ids) {
  return {{"bos_token_id", ids_json(ids.bos)}, {"eos_token_id", ids_json(ids.eos)}, {"do_sample", false}};
}

HfTokenIds hf_token_ids(const nlohmann::json& config) {
  auto read = [&](const char* key) {
    std::vector<int64_t> out;
    if (!config.contains(key) || config[key].is_null()) return out;
    const auto& v = config[key];
    if (v.is_number_integer()) return std::vector<int64_t>{v.get<int64_t>()};
    FS_CHECK(v.is_array(), "'", key, "' must be an integer or a list of integers");
    for (const auto& x : v) {
      FS_CHECK(x.is_number_integer(), "'", key, "' must be an integer or a list of integers");
      out.push_back(x.get<int64_t>());
    }
    return out;
  };
  return {read("bos_token_id"), read("eos_token_id")};
}

namespace {

// A Hugging Face config.json's keys, each error naming the file.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& hf, const std::string& path) : hf_(hf), path_(path) {}
  const nlohmann::json& hf() const { return hf_; }
  const std::string& path() const { return path_; }
  double number(const nlohmann::json& j, const char* key, std::optional<double> fallback) const {
    if (!j.contains(key) || j[key].is_null()) {
      FS_CHECK(fallback.has_value(), path_, ": no '", key, "'");
      return *fallback;
    }
    FS_CHECK(j[key].is_number(), path_, ": '", key, "' is not a number");
    return j[key].get<double>();
  }
  int64_t integer(const char* key, std::optional<int64_t> fallback) const {
    if (!hf_.contains(key) || hf_[key].is_null()) {
      FS_CHECK(fallback.has_value(), path_, ": no '", key, "'");
      return *fallback;
    }
    FS_CHECK(hf_[key].is_number_integer() && hf_[key].get<int64_t>() > 0, path_, ": '", key,
             "' must be a positive integer, got ", hf_[key].dump());
    return hf_[key].get<int64_t>();
  }
  void refuse_true(const char* key, const char* why) const {
    FS_CHECK(!hf_.value(key, false), path_, ": ", key, " = true is not supported (", why, ")");
  }

 private:
  const nlohmann::json& hf_;
  const std::string& path_;
};

// A Llama as fedshard's: no other architecture, activation, biases, dropout, quantization or tensor split.
void check_llama(const HfConfigReader& r) {
  const auto& hf = r.hf();
  const auto& path = r.path();
  const std::string type = hf.value("model_type", "");
  FS_CHECK(type == "llama", path, ": model_type '", type, "' is not supported (only llama)");
  if (hf.contains("architectures"))
    for (const auto& a : hf["architectures"])
      FS_CHECK(a == "LlamaForCausalLM", path, ": architectures ", a.dump(), " is not supported (only LlamaForCausalLM)");
  const std::string act = hf.value("hidden_act", "silu");
  FS_CHECK(act == "silu", path, ": hidden_act '", act, "' is not supported (Llama's SwiGLU uses silu)");
  r.refuse_true("attention_bias", "fedshard's Llama has no bias terms");
  r.refuse_true("mlp_bias", "fedshard's Llama has no bias terms");
  FS_CHECK(r.number(hf, "attention_dropout", 0.0) == 0.0, path, ": attention_dropout = ",
           hf["attention_dropout"].dump(), " is not supported (fedshard trains without dropout)");
  FS_CHECK(!hf.contains("quantization_config"), path, ": quantization_config is not supported (load unquantized weights)");
  FS_CHECK(r.integer("pretraining_tp", 1) == 1, path, ": pretraining_tp ", hf["pretraining_tp"].dump(),
           " is not supported (only 1)");
}

// RoPE's theta and scaling: transformers 5 keeps them in rope_parameters, 4 in rope_theta and rope_scaling.
void read_rope(const HfConfigReader& r, ModelConfig& c) {
  const auto& hf = r.hf();
  const auto& path = r.path();
  const bool v5 = hf.contains("rope_parameters") && hf["rope_parameters"].is_object();
  const nlohmann::json rope = v5 ? hf["rope_parameters"] : hf.value("rope_scaling", nlohmann::json());
  const char* rope_key = v5 ? "rope_parameters" : "rope_scaling";
  c.rope_theta = r.number(v5 ? rope : hf, "rope_theta", 10000.0);
  if (rope.is_null()) return;
  FS_CHECK(rope.is_object(), path, ": ", rope_key, " is not an object");
  const std::string rope_type = rope.value("rope_type", rope.value("type", std::string("default")));
  FS_CHECK(rope_type == "default" || rope_type == "llama3", path, ": ", rope_key, " type '", rope_type,
           "' is not supported (default, llama3)");
  if (rope_type != "llama3") return;
  RopeScaling s;
  s.factor = r.number(rope, "factor", std::nullopt);
  s.low_freq_factor = r.number(rope, "low_freq_factor", std::nullopt);
  s.high_freq_factor = r.number(rope, "high_freq_factor", std::nullopt);
  s.original_max_position = static_cast<int64_t>(r.number(rope, "original_max_position_embeddings", std::nullopt));
  FS_CHECK(s.factor > 0 && s.high_freq_factor > s.low_freq_factor && s.original_max_position > 0, path, ": ",
           rope_key, " has inconsistent llama3 values");
  c.rope_scaling = s;
}

}  // namespace

ModelConfig model_from_hf_config(const nlohmann::json& hf, const std::string& path, const std::string& name) {
  FS_CHECK(hf.is_object(), path, ": not a JSON object");
  const HfConfigReader r(hf, path);
  check_llama(r);
  ModelConfig c;
  c.name = name;
  c.dim = r.integer("hidden_size", std::nullopt);
  c.n_layers = r.integer("num_hidden_layers", std::nullopt);
  c.n_heads = r.integer("num_attention_heads", std::nullopt);
  c.n_kv_heads = r.integer("num_key_value_heads", c.n_heads);
  c.vocab_size = r.integer("vocab_size", std::nullopt);
  c.ffn_hidden = r.integer("intermediate_size", std::nullopt);
  c.max_seq_len = r.integer("max_position_embeddings", std::nullopt);
  c.norm_eps = r.number(hf, "rms_norm_eps", std::nullopt);
  c.tie_embeddings = hf.value("tie_word_embeddings", false);
  FS_CHECK(c.dim % c.n_heads == 0, path, ": hidden_size ", c.dim, " is not divisible by num_attention_heads ",
           c.n_heads);
  const int64_t head_dim = r.integer("head_dim", c.dim / c.n_heads);
  FS_CHECK(head_dim == c.dim / c.n_heads, path, ": head_dim ", head_dim, " is not supported (only hidden_size / ",
           "num_attention_heads = ", c.dim / c.n_heads, ")");
  read_rope(r, c);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(cat(path, ": ", e.what()));
  }
  return c;
}

}  // namespace fedshard::model
