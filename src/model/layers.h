// Stateless Llama building blocks on plain tensors. Reduced-precision inputs are upcast to float32 for the
// numerically sensitive parts (norm statistics, softmax), float64 stays float64.
#pragma once

#include <ATen/ATen.h>

#include "model/config.h"

namespace fedshard::model {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Whether this LibTorch has at::scaled_dot_product_attention (2.0 and later).
bool sdpa_available();
// "auto" | "sdpa" | "math". Throws fedshard::Error on another name, and for sdpa on a LibTorch without it.
AttentionKernel parse_attention_kernel(const std::string& name);

// Causal grouped-query attention core. q: [B, T, H, D]; k, v: [B, S, KV, D] with H % KV == 0 and S >= T: the
// queries are the last T of the S positions (S > T when decoding with a KV cache; that case always takes the
// math kernel, whose mask is aligned to the end). Returns [B, T, H*D]. kernel: model/config.h (Auto = sdpa
// where LibTorch has it).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionKernel kernel = AttentionKernel::Auto);

// SwiGLU feed-forward: w2(silu(w1 x) * w3 x).
at::Tensor swiglu(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2, const at::Tensor& w3);

}  // namespace fedshard::model
