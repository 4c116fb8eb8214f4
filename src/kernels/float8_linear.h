// Linear layers with float8 matmuls, torchao's "tensorwise" recipe: each operand scaled by float8_max / amax of
// the current tensor (float32 scale, no history), e4m3 for the input and the weight in forward, e5m2 for the
// output's gradient in backward, and the three matmuls of a linear layer (output, input gradient, weight
// gradient) through ATen's _scaled_mm with output in the input's dtype (fast accumulation in the output's only).
// Master weights and everything outside the matmuls are untouched. Selected by model.matmul_dtype = float8 (GPUs
// of compute capability 8.9 and later; the option space refuses it elsewhere).
#pragma once

#include <ATen/ATen.h>

namespace fedshard::kernels {

// Whether this LibTorch has float8 dtypes and _scaled_mm with tensor scales (2.5 and later).
bool float8_available();

// x [..., in] @ w[out, in]^T in float8 with per-tensor dynamic scales; in and out must be multiples of 16 (as
// _scaled_mm requires), and so must x's rows for the weight's gradient.
at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& w);

// e4m3's and e5m2's largest finite values.
constexpr double kFloat8E4m3Max = 448.0;
constexpr double kFloat8E5m2Max = 57344.0;

}  // namespace fedshard::kernels
