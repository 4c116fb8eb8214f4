#include "kernels/float8_linear.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include "util/error.h"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define FEDSHARD_FLOAT8 1
#endif

namespace fedshard::kernels {

#ifdef FEDSHARD_FLOAT8

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A tensor in float8 with the float32 scalar that turns it back: t ~ data * inverse_scale.
struct Float8Tensor {
  at::Tensor data;
  at::Tensor inverse_scale;
};

// torchao's tensorwise cast: scale = max / amax (amax at least 1e-12), values saturated to +-max.
Float8Tensor to_float8(const at::Tensor& t, at::ScalarType type, double max) {
  const auto amax = t.abs().max().to(at::kFloat).clamp_min(1e-12);
  const auto scale = at::full({}, max, amax.options()) / amax;
  return {(t.to(at::kFloat) * scale).clamp(-max, max).to(type), scale.reciprocal()};
}

// Column-major for _scaled_mm's second operand: the transpose of a contiguous transpose.
at::Tensor column_major(const at::Tensor& t) { return t.t().contiguous().t(); }

class Float8Linear : public torch::autograd::Function<Float8Linear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    const int64_t in = x.size(-1);
    const auto x2 = x.reshape({-1, in});
    const auto xq = to_float8(x2, at::kFloat8_e4m3fn, kFloat8E4m3Max);
    const auto wq = to_float8(w, at::kFloat8_e4m3fn, kFloat8E4m3Max);
    // The output's matmul with fast accumulation, the gradients' without (torchao's tensorwise recipe).
    auto out = at::_scaled_mm(xq.data, wq.data.t(), xq.inverse_scale, wq.inverse_scale, {}, {}, x.scalar_type(),
                              /*use_fast_accum=*/true);
    ctx->save_for_backward({xq.data, xq.inverse_scale, wq.data, wq.inverse_scale});
    ctx->saved_data["x_shape"] = x.sizes().vec();
    auto shape = x.sizes().vec();
    shape.back() = w.size(0);
    return out.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x8 = saved[0], &x_inv = saved[1], &w8 = saved[2], &w_inv = saved[3];
    const auto dtype = grads[0].scalar_type();
    const auto go = grads[0].reshape({-1, grads[0].size(-1)});
    const auto gq = to_float8(go, at::kFloat8_e5m2, kFloat8E5m2Max);
    // dx = dy w: [M, out] x [out, in]; dw = dy^T x: [out, M] x [M, in].
    auto dx = at::_scaled_mm(gq.data, column_major(w8), gq.inverse_scale, w_inv, {}, {}, dtype);
    auto dw = at::_scaled_mm(gq.data.t().contiguous(), column_major(x8), gq.inverse_scale, x_inv, {}, {}, dtype);
    return {dx.view(ctx->saved_data["x_shape"].toIntVector()), dw};
  }
};

}  // namespace

bool float8_available() { return true; }

at::Tensor float8_linear(const at::Tensor& x, const at::Tensor& w) {
  FS_ASSERT(w.dim() == 2 && x.size(-1) == w.size(1) && w.size(0) % 16 == 0 && w.size(1) % 16 == 0,
            "float8_linear: ", x.sizes(), " x ", w.sizes(), "^T (sizes must be multiples of 16)");
  return Float8Linear::apply(x, w);
}

#else

bool float8_available() { return false; }

at::Tensor float8_linear(const at::Tensor&, const at::Tensor&) {
  throw std::logic_error("float8_linear: this LibTorch (" TORCH_VERSION ") has no _scaled_mm");
}

#endif

}  // namespace fedshard::kernels
#undef FEDSHARD_FLOAT8
