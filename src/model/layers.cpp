#include "model/layers.h"

#include <torch/version.h>

#include <cmath>
#include <limits>
#include <string>

#include "util/error.h"

namespace fedshard::model {

namespace {
at::ScalarType accumulation_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }
}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto xf = x.to(accumulation_type(x.scalar_type()));
  auto normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

bool sdpa_available() { return TORCH_VERSION_MAJOR >= 2; }

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "auto") return AttentionKernel::Auto;
  if (name == "math") return AttentionKernel::Math;
  FS_CHECK(name == "sdpa", "model.attention must be auto, sdpa or math, got '", name, "'");
  FS_CHECK(sdpa_available(), "model.attention = sdpa needs LibTorch >= 2.0 (this build has ", TORCH_VERSION,
           "); use auto or math");
  return AttentionKernel::Sdpa;
}

Kernels parse_kernels(const std::string& name) {
  FS_CHECK(name == "aten" || name == "fused", "model.kernels must be aten or fused, got '", name, "'");
  return name == "fused" ? Kernels::Fused : Kernels::Aten;
}

MatmulDtype parse_matmul_dtype(const std::string& name) {
  FS_CHECK(name == "compute" || name == "float8", "model.matmul_dtype must be compute or float8, got '", name, "'");
  return name == "float8" ? MatmulDtype::Float8 : MatmulDtype::Compute;
}

void parse_cross_entropy(const std::string& spec, ModelConfig& cfg) {
  const std::string prefix = "chunked:";
  if (spec == "full" || spec == "chunked") {
    cfg.chunked_loss = spec == "chunked";
    cfg.loss_chunk_rows = 0;
    return;
  }
  int64_t rows = 0;
  size_t used = 0;
  if (spec.rfind(prefix, 0) == 0) {
    try {
      rows = std::stoll(spec.substr(prefix.size()), &used);
    } catch (const std::exception&) {
      used = 0;
    }
  }
  FS_CHECK(used > 0 && used == spec.size() - prefix.size() && rows > 0,
           "model.cross_entropy must be chunked, chunked:ROWS (ROWS > 0) or full, got '", spec, "'");
  cfg.chunked_loss = true;
  cfg.loss_chunk_rows = rows;
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionKernel kernel) {
  const int64_t heads = q.size(2);
  const int64_t rep = heads / k.size(2);
  // [B, T, KV, D] -> [B, H, T, D]: kv head j serves query heads j*rep .. j*rep+rep-1 (Llama's repeat_kv).
  auto expand = [rep](const at::Tensor& t) {
    auto th = t.transpose(1, 2);
    return rep == 1 ? th : th.repeat_interleave(rep, /*dim=*/1);
  };
  auto qh = q.transpose(1, 2);
  const int64_t t = q.size(1), s = k.size(1);
  at::Tensor out;
#if TORCH_VERSION_MAJOR >= 2
  // sdpa's is_causal aligns its mask to the start, which is right only when queries and keys coincide.
  if (kernel != AttentionKernel::Math && s == t) {
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 5
    // Grouped heads natively: no repeated K/V in memory.
    out = at::scaled_dot_product_attention(qh, k.transpose(1, 2), v.transpose(1, 2), /*attn_mask=*/{},
                                           /*dropout_p=*/0.0, /*is_causal=*/true, /*scale=*/std::nullopt,
                                           /*enable_gqa=*/rep > 1);
#else
    out = at::scaled_dot_product_attention(qh, expand(k), expand(v), /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                           /*is_causal=*/true);
#endif
    return out.transpose(1, 2).reshape({q.size(0), q.size(1), heads * q.size(3)});
  }
#else
  FS_ASSERT(kernel != AttentionKernel::Sdpa, "sdpa attention on LibTorch ", TORCH_VERSION);
#endif
  FS_ASSERT(s >= t, "attention: ", t, " queries but only ", s, " keys");
  auto kh = expand(k);
  auto vh = expand(v);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  auto scores = at::matmul(qh, kh.transpose(-2, -1)) * scale;  // [B, H, T, S]
  auto future = at::ones({t, s}, q.options().dtype(at::kBool)).triu(1 + s - t);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  auto probs = at::softmax(scores, -1, accumulation_type(q.scalar_type())).to(q.scalar_type());
  out = at::matmul(probs, vh);  // [B, H, T, D]
  return out.transpose(1, 2).reshape({q.size(0), q.size(1), heads * q.size(3)});
}

at::Tensor swiglu_gate(const at::Tensor& g, const at::Tensor& u) { return at::silu(g) * u; }

}  // namespace fedshard::model
