#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/dispatch.h"
#include "kernels/fused.h"
#include "kernels/swiglu_math.h"

namespace fedshard::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
void swiglu_forward_elements(const T* g, const T* u, T* y, int64_t n) {
  using Acc = typename AccOf<T>::type;
  const RoundTo<T, Acc> round;
  at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y[i] = static_cast<T>(swiglu_value(static_cast<Acc>(g[i]), static_cast<Acc>(u[i]), round));
  });
}

template <typename T>
void swiglu_backward_elements(const T* g, const T* u, const T* dy, T* dg, T* du, int64_t n) {
  using Acc = typename AccOf<T>::type;
  const RoundTo<T, Acc> round;
  at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Acc a, b;
      swiglu_grad(static_cast<Acc>(g[i]), static_cast<Acc>(u[i]), static_cast<Acc>(dy[i]), round, a, b);
      dg[i] = static_cast<T>(a);
      du[i] = static_cast<T>(b);
    }
  });
}

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& g_in, const at::Tensor& u_in) {
    FS_ASSERT(g_in.sizes() == u_in.sizes() && g_in.scalar_type() == u_in.scalar_type(), "swiglu_gate: g ", g_in.sizes(),
              " and u ", u_in.sizes(), " differ");
    const auto g = g_in.contiguous(), u = u_in.contiguous();
    auto y = at::empty_like(g);
    dispatch(
        g, "swiglu_gate",
        [&] {
          cuda::swiglu_forward(cuda_dtype(g.scalar_type()), g.data_ptr(), u.data_ptr(), y.data_ptr(), g.numel(),
                               stream_of(g));
        },
        [&](auto tag) {
          using T = decltype(tag);
          swiglu_forward_elements<T>(g.data_ptr<T>(), u.data_ptr<T>(), y.data_ptr<T>(), g.numel());
        });
    ctx->save_for_backward({g, u});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &g = saved[0], &u = saved[1];
    const auto dy = grads[0].contiguous();
    auto dg = at::empty_like(g), du = at::empty_like(u);
    dispatch(
        g, "swiglu_gate backward",
        [&] {
          cuda::swiglu_backward(cuda_dtype(g.scalar_type()), g.data_ptr(), u.data_ptr(), dy.data_ptr(), dg.data_ptr(),
                                du.data_ptr(), g.numel(), stream_of(g));
        },
        [&](auto tag) {
          using T = decltype(tag);
          swiglu_backward_elements<T>(g.data_ptr<T>(), u.data_ptr<T>(), dy.data_ptr<T>(), dg.data_ptr<T>(),
                                      du.data_ptr<T>(), g.numel());
        });
    return {dg, du};
  }
};

}  // namespace

at::Tensor swiglu_gate(const at::Tensor& g, const at::Tensor& u) { return SwigluFunction::apply(g, u); }

}  // namespace fedshard::kernels
