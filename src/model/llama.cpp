#include "model/llama.h"

#include <ATen/core/grad_mode.h>
#include <cmath>
#include <set>

#include <ATen/CPUGeneratorImpl.h>

#include "kernels/float8_linear.h"
#include "kernels/fused.h"
#include "model/layers.h"
#include "util/error.h"

namespace fedshard::model {

namespace {

// Holds a unit's parameter slots; allocates them unless the model is built unmaterialized.
class SlotList {
 public:
  SlotList(at::TensorOptions opts, bool materialize) : opts_(opts), materialize_(materialize) {}
  void add(std::string name, at::Tensor& t, std::vector<int64_t> shape) {
    if (materialize_) t = at::empty(shape, opts_);
    slots_.push_back({std::move(name), &t, std::move(shape)});
  }
  void alias(std::string name, at::Tensor& t, std::vector<int64_t> shape) {
    slots_.push_back({std::move(name), &t, std::move(shape)});
  }
  const std::vector<ParamSlot>& get() const { return slots_; }

 private:
  at::TensorOptions opts_;
  bool materialize_;
  std::vector<ParamSlot> slots_;
};

// A block's and the head's norms, rotary embedding, gate and linear layers, computed as the config chooses
// (model.kernels, model.matmul_dtype). The ATen choices are exactly the compositions of model/layers.h.
class Ops {
 public:
  explicit Ops(const ModelConfig& c) : cfg_(c) {}
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w) const {
    return fused() ? kernels::rms_norm(x, w, cfg_.norm_eps) : rms_norm(x, w, cfg_.norm_eps);
  }
  // (h, norm(h)) of h = x + delta.
  std::pair<at::Tensor, at::Tensor> add_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w) const {
    if (fused()) {
      auto [h, y] = kernels::add_rms_norm(x, delta, w, cfg_.norm_eps);
      return {h, y};
    }
    auto h = x + delta;
    return {h, rms_norm(h, w, cfg_.norm_eps)};
  }
  at::Tensor linear(const at::Tensor& x, const at::Tensor& w) const {
    return cfg_.matmul == MatmulDtype::Float8 ? kernels::float8_linear(x, w) : at::linear(x, w);
  }
  // y [B, T, heads * head_dim] -> rotated [B, T, heads, head_dim].
  at::Tensor rotate(const Rope& rope, const at::Tensor& y, int64_t heads, int64_t start) const {
    const int64_t b = y.size(0), t = y.size(1), hd = cfg_.head_dim();
    if (!fused()) return rope.apply(y.view({b, t, heads, hd}), start);
    const auto [cos, sin] = rope.tables(y, start);
    return kernels::rope_(y, cos, sin, hd).view({b, t, heads, hd});
  }
  // w2(silu(w1 x) * w3 x).
  at::Tensor feed_forward(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3) const {
    const auto g = linear(x, w1), u = linear(x, w3);
    return linear(fused() ? kernels::swiglu_gate(g, u) : swiglu_gate(g, u), w2);
  }

 private:
  bool fused() const { return cfg_.kernels == Kernels::Fused; }
  const ModelConfig& cfg_;
};

class EmbeddingUnit : public Unit {
 public:
  EmbeddingUnit(const ModelConfig& c, at::TensorOptions o, bool materialize) : slots_(o, materialize) {
    slots_.add("tok_embeddings.weight", weight, {c.vocab_size, c.dim});
  }
  std::string name() const override { return "embedding"; }
  using Unit::forward;
  at::Tensor forward(const at::Tensor& tokens) override { return at::embedding(weight, tokens); }
  std::vector<ParamSlot> params() override { return slots_.get(); }
  at::Tensor weight;

 private:
  SlotList slots_;
};

class BlockUnit : public Unit {
 public:
  BlockUnit(const ModelConfig& c, int64_t layer, at::TensorOptions o, bool materialize, std::shared_ptr<Rope> rope)
      : cfg_(c), ops_(cfg_), layer_(layer), rope_(std::move(rope)), slots_(o, materialize) {
    const int64_t kv_dim = c.n_kv_heads * c.head_dim();
    const int64_t hidden = c.ffn_hidden_dim();
    const std::string p = name() + ".";
    slots_.add(p + "attention_norm.weight", attention_norm, {c.dim});
    slots_.add(p + "attention.wq.weight", wq, {c.dim, c.dim});
    slots_.add(p + "attention.wk.weight", wk, {kv_dim, c.dim});
    slots_.add(p + "attention.wv.weight", wv, {kv_dim, c.dim});
    slots_.add(p + "attention.wo.weight", wo, {c.dim, c.dim});
    slots_.add(p + "ffn_norm.weight", ffn_norm, {c.dim});
    slots_.add(p + "feed_forward.w1.weight", w1, {hidden, c.dim});
    slots_.add(p + "feed_forward.w2.weight", w2, {c.dim, hidden});
    slots_.add(p + "feed_forward.w3.weight", w3, {hidden, c.dim});
  }
  std::string name() const override { return "layers." + std::to_string(layer_); }

  at::Tensor forward(const at::Tensor& x) override {
    const int64_t b = x.size(0), t = x.size(1), hd = cfg_.head_dim();
    auto xn = ops_.norm(x, attention_norm);
    auto q = ops_.rotate(*rope_, ops_.linear(xn, wq), cfg_.n_heads, 0);
    auto k = ops_.rotate(*rope_, ops_.linear(xn, wk), cfg_.n_kv_heads, 0);
    auto v = ops_.linear(xn, wv).view({b, t, cfg_.n_kv_heads, hd});
    return finish(x, q, k, v);
  }

  at::Tensor forward(const at::Tensor& x, KvCache& cache) override {
    const int64_t b = x.size(0), t = x.size(1), hd = cfg_.head_dim(), start = cache.length;
    FS_CHECK(start + t <= cache.capacity, "KV cache of ", cache.capacity, " positions is full");
    auto xn = ops_.norm(x, attention_norm);
    auto q = ops_.rotate(*rope_, ops_.linear(xn, wq), cfg_.n_heads, start);
    auto k = ops_.rotate(*rope_, ops_.linear(xn, wk), cfg_.n_kv_heads, start);
    auto v = ops_.linear(xn, wv).view({b, t, cfg_.n_kv_heads, hd});
    const auto layer = static_cast<size_t>(layer_);
    if (cache.k.size() <= layer) cache.k.resize(layer + 1), cache.v.resize(layer + 1);
    if (!cache.k[layer].defined()) {
      cache.k[layer] = at::empty({b, cache.capacity, cfg_.n_kv_heads, hd}, k.options());
      cache.v[layer] = at::empty({b, cache.capacity, cfg_.n_kv_heads, hd}, v.options());
    }
    cache.k[layer].narrow(1, start, t).copy_(k);
    cache.v[layer].narrow(1, start, t).copy_(v);
    return finish(x, q, cache.k[layer].narrow(1, 0, start + t), cache.v[layer].narrow(1, 0, start + t));
  }

  std::vector<ParamSlot> params() override { return slots_.get(); }

  at::Tensor attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;

 private:
  at::Tensor finish(const at::Tensor& x, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const auto [h, hn] = ops_.add_norm(x, ops_.linear(causal_attention(q, k, v, cfg_.attention), wo), ffn_norm);
    return h + ops_.feed_forward(hn, w1, w2, w3);
  }

  ModelConfig cfg_;
  Ops ops_;
  int64_t layer_;
  std::shared_ptr<Rope> rope_;
  SlotList slots_;
};

class HeadUnit : public Unit {
 public:
  // tied: the output projection reads the embedding's weight slot.
  HeadUnit(const ModelConfig& c, at::TensorOptions o, bool materialize, at::Tensor* tied_weight)
      : cfg_(c), ops_(cfg_), slots_(o, materialize) {
    slots_.add("norm.weight", norm, {c.dim});
    if (tied_weight) {
      output_ = tied_weight;
      slots_.alias("tok_embeddings.weight", *tied_weight, {c.vocab_size, c.dim});
    } else {
      output_ = &own_output;
      slots_.add("output.weight", own_output, {c.vocab_size, c.dim});
    }
  }
  std::string name() const override { return "head"; }
  using Unit::forward;
  at::Tensor forward(const at::Tensor& x) override { return at::linear(ops_.norm(x, norm), *output_); }
  at::Tensor forward_loss(const at::Tensor& x, const at::Tensor& targets, kernels::Reduction reduction) override {
    const auto h = ops_.norm(x, norm);
    if (cfg_.chunked_loss) {
      return kernels::linear_cross_entropy(h, *output_, targets, cfg_.loss_rows(), reduction);
    }
    const auto logits = at::linear(h, *output_);
    if (reduction == kernels::Reduction::Mean) return next_token_loss(logits, targets);
    auto flat = logits.reshape({-1, logits.size(-1)});
    if (flat.scalar_type() != at::kDouble) flat = flat.to(at::kFloat);
    return at::cross_entropy_loss(flat, targets.reshape({-1}), {}, at::Reduction::Sum, kernels::kIgnoreIndex);
  }
  std::vector<ParamSlot> params() override { return slots_.get(); }

  at::Tensor norm, own_output;

 private:
  ModelConfig cfg_;
  Ops ops_;
  at::Tensor* output_;
  SlotList slots_;
};

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

Llama::Llama(ModelConfig cfg, at::ScalarType dtype, bool materialize) : cfg_(std::move(cfg)) {
  cfg_.validate();
  const auto opts = at::TensorOptions().dtype(dtype);
  rope_ = std::make_shared<Rope>(cfg_);
  auto embedding = std::make_unique<EmbeddingUnit>(cfg_, opts, materialize);
  at::Tensor* tied = cfg_.tie_embeddings ? &embedding->weight : nullptr;
  units_.push_back(std::move(embedding));
  for (int64_t i = 0; i < cfg_.n_layers; ++i)
    units_.push_back(std::make_unique<BlockUnit>(cfg_, i, opts, materialize, rope_));
  units_.push_back(std::make_unique<HeadUnit>(cfg_, opts, materialize, tied));
}

std::vector<ParamSlot> Llama::named_parameters() const {
  std::vector<ParamSlot> out;
  std::set<const at::Tensor*> seen;
  for (const auto& u : units_)
    for (auto& s : u->params())
      if (seen.insert(s.tensor).second) out.push_back(s);
  return out;
}

at::Tensor Llama::forward(const at::Tensor& tokens) const {
  at::Tensor x = tokens;
  for (const auto& u : units_) x = u->forward(x);
  return x;
}

at::Tensor Unit::forward_loss(const at::Tensor&, const at::Tensor&, kernels::Reduction) {
  throw std::logic_error("unit " + name() + " has no loss: only the model's last unit does");
}

at::Tensor Llama::loss(const at::Tensor& tokens, const at::Tensor& targets, kernels::Reduction reduction) const {
  at::Tensor x = tokens;
  for (size_t i = 0; i + 1 < units_.size(); ++i) x = units_[i]->forward(x);
  return units_.back()->forward_loss(x, targets, reduction);
}

at::Tensor Llama::forward(const at::Tensor& tokens, KvCache& cache) const {
  at::Tensor x = tokens;
  for (const auto& u : units_) x = u->forward(x, cache);
  cache.length += tokens.size(1);
  return x;
}

void init_parameter(const ParamSlot& s, const ModelConfig& cfg, uint64_t seed, at::ScalarType dtype) {
  auto ends_with = [&](const char* suffix) {
    const std::string suf(suffix);
    return s.name.size() >= suf.size() && s.name.compare(s.name.size() - suf.size(), suf.size(), suf) == 0;
  };
  if (!s.tensor->defined()) *s.tensor = at::empty(s.shape, at::TensorOptions().dtype(dtype));
  if (ends_with("norm.weight")) {
    s.tensor->fill_(1.0);
    return;
  }
  double std_dev = 0.02;
  double clamp = 0.0;
  if (s.name == "tok_embeddings.weight") {
    std_dev = cfg.tie_embeddings ? 1.0 / std::sqrt(static_cast<double>(cfg.dim)) : 1.0;
  } else if (s.name == "output.weight") {
    std_dev = 1.0 / std::sqrt(static_cast<double>(cfg.dim));
    clamp = 3.0 * std_dev;
  } else if (ends_with("attention.wo.weight") || ends_with("feed_forward.w2.weight") ||
             ends_with("feed_forward.w3.weight")) {
    // Depth-scaled init of the projections that write into the residual stream (torchtitan's depth_init).
    const int64_t layer = std::stoll(s.name.substr(7, s.name.find('.', 7) - 7));
    std_dev = 0.02 / std::sqrt(2.0 * static_cast<double>(layer + 1));
  }
  auto gen = at::detail::createCPUGenerator(fnv1a(s.name, 14695981039346656037ULL ^ (seed * 0x9E3779B97F4A7C15ULL)));
  auto values = at::normal(0.0, std_dev, s.shape, gen, at::TensorOptions().dtype(at::kFloat));
  if (clamp > 0) values = values.clamp(-clamp, clamp);
  s.tensor->copy_(values);
}

void init_parameters(const Llama& model, uint64_t seed) {
  at::NoGradGuard no_grad;
  for (const auto& s : model.named_parameters()) init_parameter(s, model.config(), seed, s.tensor->scalar_type());
}

at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& targets) {
  auto flat = logits.reshape({-1, logits.size(-1)});
  if (flat.scalar_type() != at::kDouble) flat = flat.to(at::kFloat);
  return at::cross_entropy_loss(flat, targets.reshape({-1}));
}

}  // namespace fedshard::model
