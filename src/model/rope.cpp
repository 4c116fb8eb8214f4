#include "model/rope.h"

#include <cmath>

#include "util/error.h"

namespace fedshard::model {

at::Tensor rope_inv_freq(const ModelConfig& cfg) {
  const int64_t half = cfg.head_dim() / 2;
  auto inv = at::empty({half}, at::kDouble);
  auto* p = inv.data_ptr<double>();
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(cfg.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(cfg.head_dim()));
    if (cfg.rope_scaling) {
      // Llama 3.1: keep high frequencies, divide low ones by `factor`, interpolate smoothly in between.
      const auto& s = *cfg.rope_scaling;
      const double old_len = static_cast<double>(s.original_max_position);
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    p[i] = f;
  }
  return inv;
}

Rope::Rope(const ModelConfig& cfg) : inv_freq_(rope_inv_freq(cfg)), max_seq_len_(cfg.max_seq_len) {}

std::pair<at::Tensor, at::Tensor> Rope::tables(const at::Tensor& x, int64_t start) const {
  const int64_t t = x.size(1);
  FS_CHECK(start + t <= max_seq_len_, "sequence length ", start + t, " exceeds the model's max_seq_len ", max_seq_len_);
  // Rotate in at least float32 and round once at the end (torchtitan's apply_rotary_emb): bf16 tables would
  // put a bf16 rounding error on every angle.
  const auto compute = at::promote_types(x.scalar_type(), at::kFloat);
  // [T, 1, head_dim] broadcasts over batch and heads; angles in float64, then rounded once.
  if (!cos_cached_.defined() || cached_start_ != start || cos_cached_.size(0) != t ||
      cos_cached_.scalar_type() != compute || cos_cached_.device() != x.device()) {
    const auto angles = at::outer(at::arange(start, start + t, at::kDouble), inv_freq_);  // [T, head_dim/2]
    const auto both = at::cat({angles, angles}, -1);  // the rotate-half layout repeats the frequencies
    const auto opts = x.options().dtype(compute).requires_grad(false);
    cos_cached_ = both.cos().unsqueeze(1).to(opts);
    sin_cached_ = both.sin().unsqueeze(1).to(opts);
    cached_start_ = start;
  }
  return {cos_cached_, sin_cached_};
}

at::Tensor Rope::apply(const at::Tensor& x, int64_t start) const {
  const auto [cos, sin] = tables(x, start);
  const auto xc = x.to(cos.scalar_type());
  const int64_t half = x.size(-1) / 2;
  auto x1 = xc.narrow(-1, 0, half);
  auto x2 = xc.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  return (xc * cos + rotated * sin).to(x.scalar_type());
}

}  // namespace fedshard::model
