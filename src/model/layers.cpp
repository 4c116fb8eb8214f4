#include "model/layers.h"

#include <torch/version.h>

#include <cmath>

namespace fedshard::model {

namespace {
at::ScalarType accumulation_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }
}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto xf = x.to(accumulation_type(x.scalar_type()));
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t heads = q.size(2);
  const int64_t rep = heads / k.size(2);
  // [B, T, KV, D] -> [B, H, T, D]: kv head j serves query heads j*rep .. j*rep+rep-1 (Llama's repeat_kv).
  auto expand = [rep](const at::Tensor& t) {
    auto th = t.transpose(1, 2);
    return rep == 1 ? th : th.repeat_interleave(rep, /*dim=*/1);
  };
  auto qh = q.transpose(1, 2);
  auto kh = expand(k);
  auto vh = expand(v);
#if TORCH_VERSION_MAJOR >= 2
  auto out = at::scaled_dot_product_attention(qh, kh, vh, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  const int64_t t = q.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  auto scores = at::matmul(qh, kh.transpose(-2, -1)) * scale;  // [B, H, T, T]
  auto future = at::ones({t, t}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  auto probs = at::softmax(scores, -1, accumulation_type(q.scalar_type())).to(q.scalar_type());
  auto out = at::matmul(probs, vh);  // [B, H, T, D]
#endif
  return out.transpose(1, 2).reshape({q.size(0), q.size(1), heads * q.size(3)});
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3) {
  return at::linear(at::silu(at::linear(x, w1)) * at::linear(x, w3), w2);
}

}  // namespace fedshard::model
