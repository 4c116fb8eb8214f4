#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/dispatch.h"
#include "kernels/fused.h"
#include "kernels/rope_math.h"

namespace fedshard::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// rows = B * T rows of heads * head_dim; row r is at position r % seq. in and out may be the same buffer.
template <typename T>
void rope_rows(const T* in, T* out, const typename AccOf<T>::type* cos, const typename AccOf<T>::type* sin,
               int64_t rows, int64_t seq, int64_t heads, int64_t head_dim, bool back) {
  using Acc = typename AccOf<T>::type;
  const RoundTo<T, Acc> round;
  const int64_t half = head_dim / 2;
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = r % seq;
      for (int64_t hd = 0; hd < heads; ++hd) {
        const int64_t o = (r * heads + hd) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const Acc c = cos[t * head_dim + i], s = sin[t * head_dim + i];
          const Acc a = static_cast<Acc>(in[o + i]), b = static_cast<Acc>(in[o + half + i]);
          Acc ya, yb;
          if (back)
            rope_rotate_back(a, b, c, s, round, ya, yb);
          else
            rope_rotate(a, b, c, s, round, ya, yb);
          out[o + i] = static_cast<T>(ya);
          out[o + half + i] = static_cast<T>(yb);
        }
      }
    }
  });
}

void rope_any(const at::Tensor& in, const at::Tensor& out, const at::Tensor& cos, const at::Tensor& sin,
              int64_t head_dim, bool back) {
  const int64_t seq = in.size(1), rows = in.size(0) * seq, heads = in.size(2) / head_dim;
  dispatch(
      in, "rope",
      [&] {
        cuda::rope(cuda_dtype(in.scalar_type()), in.data_ptr(), out.data_ptr(), cos.data_ptr(), sin.data_ptr(), rows,
                   seq, heads, head_dim, back, stream_of(in));
      },
      [&](auto tag) {
        using T = decltype(tag);
        using Acc = typename AccOf<T>::type;
        rope_rows<T>(in.data_ptr<T>(), out.data_ptr<T>(), cos.data_ptr<Acc>(), sin.data_ptr<Acc>(), rows, seq, heads,
                     head_dim, back);
      });
}

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::Tensor x, const at::Tensor& cos, const at::Tensor& sin,
                            int64_t head_dim) {
    rope_any(x, x, cos, sin, head_dim, /*back=*/false);
    ctx->mark_dirty({x});
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["head_dim"] = head_dim;
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto dy = grads[0].contiguous();
    auto dx = at::empty_like(dy);
    rope_any(dy, dx, saved[0], saved[1], ctx->saved_data["head_dim"].toInt(), /*back=*/true);
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rope_(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, int64_t head_dim) {
  FS_ASSERT(x.dim() == 3 && x.is_contiguous() && head_dim % 2 == 0 && x.size(2) % head_dim == 0,
            "rope_: x must be a contiguous [B, T, heads * head_dim], got ", x.sizes());
  FS_ASSERT(cos.scalar_type() == acc_dtype(x.scalar_type()) && cos.is_contiguous() && sin.is_contiguous() &&
                cos.numel() == x.size(1) * head_dim && cos.device() == x.device(),
            "rope_: tables of ", cos.sizes(), " ", cos.scalar_type(), " for ", x.sizes(), " ", x.scalar_type());
  return RopeFunction::apply(x, cos, sin, head_dim);
}

}  // namespace fedshard::kernels
