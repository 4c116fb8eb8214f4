#include "model/config.h"

#include <sstream>

#include "kernels/cross_entropy.h"
#include "util/error.h"

namespace fedshard::model {

int64_t ModelConfig::loss_rows() const {
  return loss_chunk_rows > 0 ? loss_chunk_rows : kernels::cross_entropy_chunk_rows(dim);
}

int64_t ModelConfig::ffn_hidden_dim() const {
  if (ffn_hidden > 0) return ffn_hidden;
  int64_t hidden = 4 * dim;
  hidden = 2 * hidden / 3;
  if (ffn_dim_multiplier) hidden = static_cast<int64_t>(*ffn_dim_multiplier * static_cast<double>(hidden));
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

int64_t ModelConfig::params_per_block() const {
  const int64_t kv_dim = n_kv_heads * head_dim();
  const int64_t norms = 2 * dim;
  const int64_t attention = dim * dim /*wq*/ + 2 * dim * kv_dim /*wk, wv*/ + dim * dim /*wo*/;
  const int64_t ffn = 3 * dim * ffn_hidden_dim();
  return norms + attention + ffn;
}

int64_t ModelConfig::param_count() const {
  return embedding_params() + n_layers * params_per_block() + head_params();
}

double ModelConfig::forward_flops_per_token(int64_t seq_len) const {
  // 2 FLOPs per multiply-add over every matmul weight (the embedding lookup is free, the head is not),
  // plus QK^T and AV: 2 * 2 * seq_len * dim per layer (causal masking not discounted, as in PaLM's MFU).
  const double matmul_params = static_cast<double>(n_layers * (params_per_block() - 2 * dim) + vocab_size * dim);
  return 2.0 * matmul_params + 4.0 * static_cast<double>(n_layers * seq_len * dim);
}

void ModelConfig::validate() const {
  FS_CHECK(dim > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0, "model '", name,
           "': dim, n_layers, n_heads and n_kv_heads must be positive");
  FS_CHECK(dim % n_heads == 0, "model '", name, "': dim ", dim, " is not divisible by n_heads ", n_heads);
  FS_CHECK(head_dim() % 2 == 0, "model '", name, "': head_dim ", head_dim(), " must be even for RoPE");
  FS_CHECK(n_heads % n_kv_heads == 0, "model '", name, "': n_heads ", n_heads, " is not divisible by n_kv_heads ",
           n_kv_heads);
  FS_CHECK(vocab_size > 0, "model '", name, "': vocab_size must be positive");
  FS_CHECK(multiple_of > 0 && ffn_hidden >= 0, "model '", name, "': multiple_of must be positive");
  FS_CHECK(max_seq_len > 0, "model '", name, "': max_seq_len must be positive");
  FS_CHECK(norm_eps > 0 && rope_theta > 0, "model '", name, "': norm_eps and rope_theta must be positive");
}

std::string architecture_difference(const ModelConfig& a, const ModelConfig& b) {
  auto differ = [](const char* field, auto x, auto y) {
    std::ostringstream os;
    if (x != y) os << field << " " << x << " vs " << y;
    return os.str();
  };
  const auto ra = a.rope_scaling.value_or(RopeScaling{0, 0, 0, 0});
  const auto rb = b.rope_scaling.value_or(RopeScaling{0, 0, 0, 0});
  for (const auto& d :
       {differ("dim", a.dim, b.dim), differ("layers", a.n_layers, b.n_layers), differ("heads", a.n_heads, b.n_heads),
        differ("kv heads", a.n_kv_heads, b.n_kv_heads), differ("vocab", a.vocab_size, b.vocab_size),
        differ("ffn hidden", a.ffn_hidden_dim(), b.ffn_hidden_dim()), differ("norm eps", a.norm_eps, b.norm_eps),
        differ("rope theta", a.rope_theta, b.rope_theta),
        differ("rope scaling", a.rope_scaling.has_value(), b.rope_scaling.has_value()),
        differ("rope scaling factor", ra.factor, rb.factor),
        differ("rope low_freq_factor", ra.low_freq_factor, rb.low_freq_factor),
        differ("rope high_freq_factor", ra.high_freq_factor, rb.high_freq_factor),
        differ("rope original_max_position", ra.original_max_position, rb.original_max_position),
        differ("tied embeddings", a.tie_embeddings, b.tie_embeddings)})
    if (!d.empty()) return d;
  return std::string();
}

namespace {

ModelConfig make(const std::string& name, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads,
                 int64_t vocab, int64_t multiple_of, std::optional<double> ffn_mult, double theta,
                 std::optional<RopeScaling> scaling, int64_t max_seq, bool tied) {
  ModelConfig c;
  c.name = name;
  c.dim = dim;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.multiple_of = multiple_of;
  c.ffn_dim_multiplier = ffn_mult;
  c.rope_theta = theta;
  c.rope_scaling = scaling;
  c.max_seq_len = max_seq;
  c.tie_embeddings = tied;
  return c;
}

}  // namespace

std::vector<std::string> preset_names() { return {"tiny", "small", "llama3.2-1b", "llama3.1-8b", "llama3.1-70b"}; }

ModelConfig preset(const std::string& name) {
  // Values of the Llama models are those of Meta's params.json / HF config.json for each release.
  if (name == "tiny") return make(name, 64, 2, 4, 2, 0, 32, std::nullopt, 10000.0, std::nullopt, 512, false);
  if (name == "small") return make(name, 256, 4, 8, 4, 0, 64, std::nullopt, 10000.0, std::nullopt, 1024, false);
  if (name == "llama3.2-1b")
    return make(name, 2048, 16, 32, 8, 128256, 256, 1.5, 500000.0, RopeScaling{32.0, 1.0, 4.0, 8192}, 131072, true);
  if (name == "llama3.1-8b")
    return make(name, 4096, 32, 32, 8, 128256, 1024, 1.3, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192}, 131072, false);
  if (name == "llama3.1-70b")
    return make(name, 8192, 80, 64, 8, 128256, 4096, 1.3, 500000.0, RopeScaling{8.0, 1.0, 4.0, 8192}, 131072, false);
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(cat("unknown model preset '", name, "' (known: ", known, ")"));
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string describe(const ModelConfig& c) {
  std::ostringstream os;
  os << "model " << c.name << "\n"
     << "  dim " << c.dim << ", layers " << c.n_layers << ", heads " << c.n_heads << " (kv " << c.n_kv_heads
     << ", head_dim " << c.head_dim() << "), ffn " << c.ffn_hidden_dim() << ", vocab " << c.vocab_size << "\n"
     << "  rope theta " << c.rope_theta;
  if (c.rope_scaling)
    os << " (llama3.1 scaling: factor " << c.rope_scaling->factor << ", low " << c.rope_scaling->low_freq_factor
       << ", high " << c.rope_scaling->high_freq_factor << ", original " << c.rope_scaling->original_max_position
       << ")";
  os << ", norm eps " << c.norm_eps << ", max seq " << c.max_seq_len << ", "
     << (c.tie_embeddings ? "tied" : "untied") << " embeddings\n"
     << "  parameters: embedding " << with_commas(c.embedding_params()) << ", per block "
     << with_commas(c.params_per_block()) << ", head " << with_commas(c.head_params()) << "\n"
     << "  total parameters: " << with_commas(c.param_count()) << "\n";
  return os.str();
}

}  // namespace fedshard::model
