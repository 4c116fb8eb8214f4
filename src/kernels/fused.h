// The fused elementwise operations of a Llama block, each an autograd function with a CUDA kernel for CUDA
// tensors and a CPU loop over the same per-element arithmetic (kernels/*_math.h) for CPU tensors. Each replaces
// an ATen composition in src/model/layers.h, its reference: same inputs, same outputs, within the rounding of the
// storage dtype (float32, bfloat16, float64). Selected by model.kernels = fused.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

namespace fedshard::kernels {

// model::rms_norm(x, weight, eps); x [..., dim], weight [dim].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// (h, rms_norm(h, weight, eps)) with h = x + delta: a block's residual add and the norm that reads it, in one pass.
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                double eps);

// Rotates x [B, T, heads * head_dim] (contiguous) in place as model::Rope::apply does, with the tables Rope
// builds: cos and sin [T, 1, head_dim] in the accumulation dtype (float32 for bfloat16 and float32 x, float64 for
// float64 x). Returns x.
at::Tensor rope_(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim);

// silu(g) * u, the SwiGLU gate between the w1/w3 projections and w2.
at::Tensor swiglu_gate(const at::Tensor& g, const at::Tensor& u);

}  // namespace fedshard::kernels
