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
// model.kernels: "aten" | "fused".
Kernels parse_kernels(const std::string& name);
// model.matmul_dtype: "compute" | "float8" (where float8 can run is the option space's to decide).
MatmulDtype parse_matmul_dtype(const std::string& name);
// model.cross_entropy: "chunked" (rows from the model's dim) | "chunked:ROWS" | "full", into cfg.chunked_loss and
// cfg.loss_chunk_rows.
void parse_cross_entropy(const std::string& spec, ModelConfig& cfg);

// Causal grouped-query attention core. q: [B, T, H, D]; k, v: [B, S, KV, D] with H % KV == 0 and S >= T: the
// queries are the last T of the S positions (S > T when decoding with a KV cache; that case always takes the
// math kernel, whose mask is aligned to the end). Returns [B, T, H*D]. kernel: model/config.h (Auto = sdpa
// where LibTorch has it).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionKernel kernel = AttentionKernel::Auto);

// SwiGLU's gate between the projections of its feed-forward w2(silu(w1 x) * w3 x): silu(g) * u.
at::Tensor swiglu_gate(const at::Tensor& g, const at::Tensor& u);

}  // namespace fedshard::model
