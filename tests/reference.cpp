#include "reference.h"

#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "model/config.h"

namespace fedshard::reference {

ReferenceTrainer::ReferenceTrainer(const model::ModelConfig& cfg, uint64_t seed, ReferenceOptions opts)
    : model_(cfg, at::kDouble), opts_(opts) {
  model::init_parameters(model_, seed);
  params_ = model_.named_parameters();
  for (auto& p : params_) {
    p.tensor->requires_grad_(true);
    m_.push_back(at::zeros_like(*p.tensor));
    v_.push_back(at::zeros_like(*p.tensor));
  }
}

double ReferenceTrainer::step(const at::Tensor& tokens) {
  for (auto& p : params_) p.tensor->mutable_grad() = at::Tensor();
  const int64_t t = tokens.size(1) - 1;
  auto logits = model_.forward(tokens.narrow(1, 0, t));
  auto loss = at::log_softmax(logits, -1)
                  .gather(-1, tokens.narrow(1, 1, t).unsqueeze(-1))
                  .neg()
                  .mean();  // written out instead of model::next_token_loss
  loss.backward();
  at::NoGradGuard no_grad;
  double sq = 0;
  for (auto& p : params_) sq += p.tensor->grad().pow(2).sum().item<double>();
  last_norm_ = std::sqrt(sq);
  double scale = 1.0;
  if (opts_.max_norm > 0) scale = std::min(1.0, opts_.max_norm / (last_norm_ + 1e-6));
  ++t_;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = *params_[i].tensor;
    auto g = p.grad() * scale;
    if (opts_.optimizer == "sgd") {
      p.mul_(1.0 - opts_.lr * opts_.weight_decay);
      p.sub_(opts_.lr * g);
      continue;
    }
    p.mul_(1.0 - opts_.lr * opts_.weight_decay);
    m_[i] = opts_.beta1 * m_[i] + (1 - opts_.beta1) * g;
    v_[i] = opts_.beta2 * v_[i] + (1 - opts_.beta2) * g * g;
    auto m_hat = m_[i] / (1 - std::pow(opts_.beta1, t_));
    auto v_hat = v_[i] / (1 - std::pow(opts_.beta2, t_));
    p.sub_(opts_.lr * m_hat / (v_hat.sqrt() + opts_.eps));
  }
  return loss.item<double>();
}

std::map<std::string, at::Tensor> ReferenceTrainer::parameters() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : params_) out[p.name] = p.tensor->detach().clone();
  return out;
}

void ReferenceTrainer::set_parameters(const std::map<std::string, at::Tensor>& values) {
  at::NoGradGuard no_grad;
  for (auto& p : params_) p.tensor->copy_(values.at(p.name));
}

void ReferenceTrainer::reset_optimizer() {
  for (size_t i = 0; i < m_.size(); ++i) {
    m_[i] = at::zeros_like(m_[i]);
    v_[i] = at::zeros_like(v_[i]);
  }
  t_ = 0;
}

void ReferenceTrainer::average_optimizers(std::vector<ReferenceTrainer>& trainers) {
  const double n = static_cast<double>(trainers.size());
  for (size_t i = 0; i < trainers[0].m_.size(); ++i) {
    at::Tensor m = at::zeros_like(trainers[0].m_[i]), v = at::zeros_like(trainers[0].v_[i]);
    for (const auto& t : trainers) {
      m = m + t.m_[i];
      v = v + t.v_[i];
    }
    for (auto& t : trainers) {
      t.m_[i] = m / n;
      t.v_[i] = v / n;
    }
  }
}

at::Tensor synthetic_batch(int64_t step, int64_t rows, int64_t seq_len, int64_t vocab) {
  auto gen = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(step));
  return at::randint(0, vocab, {rows, seq_len + 1}, gen, at::TensorOptions().dtype(at::kLong));
}

model::ModelConfig tiny_config() {
  auto c = model::preset("tiny");
  c.vocab_size = 37;
  c.dim = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.multiple_of = 16;
  return c;
}

}  // namespace fedshard::reference
