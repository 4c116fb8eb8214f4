#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/fused.h"
#include "kernels/rms_norm_math.h"

namespace fedshard::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One row at a time over rows [x: rows x dim], as the kernel's blocks do; delta: the residual add (or null).
template <typename T>
void rms_norm_forward_rows(const T* x, const T* delta, const T* w, T* h, T* y, typename AccOf<T>::type* inv,
                           int64_t rows, int64_t dim, double eps) {
  using Acc = typename AccOf<T>::type;
  const RoundTo<T, Acc> round;
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r * dim;
      Acc sum = 0;
      for (int64_t j = 0; j < dim; ++j) {
        Acc v = static_cast<Acc>(x[o + j]);
        if (delta) {
          v = residual_value(v, static_cast<Acc>(delta[o + j]), round);
          h[o + j] = static_cast<T>(v);
        }
        sum += v * v;
      }
      const Acc iv = rms_inverse(sum, dim, static_cast<Acc>(eps));
      inv[r] = iv;
      const T* src = delta ? h : x;
      for (int64_t j = 0; j < dim; ++j)
        y[o + j] = static_cast<T>(rms_norm_value(static_cast<Acc>(src[o + j]), iv, static_cast<Acc>(w[j]), round));
    }
  });
}

// dx = the norm's input gradient (+ dh); dw[j] = sum over rows, in Acc.
template <typename T>
void rms_norm_backward_rows(const T* dy, const T* dh, const T* x, const T* w, const typename AccOf<T>::type* inv,
                            T* dx, typename AccOf<T>::type* dw, int64_t rows, int64_t dim) {
  using Acc = typename AccOf<T>::type;
  const RoundTo<T, Acc> round;
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r * dim;
      Acc dot = 0;
      for (int64_t j = 0; j < dim; ++j)
        dot += rms_norm_dot_term(static_cast<Acc>(dy[o + j]), static_cast<Acc>(w[j]), static_cast<Acc>(x[o + j]));
      for (int64_t j = 0; j < dim; ++j) {
        Acc g = rms_norm_grad_input(static_cast<Acc>(dy[o + j]), static_cast<Acc>(w[j]), static_cast<Acc>(x[o + j]),
                                    inv[r], dot, dim);
        if (dh) g += static_cast<Acc>(dh[o + j]);
        dx[o + j] = static_cast<T>(g);
      }
    }
  });
  // The weight's gradient by columns: each column's sum runs over the rows in order.
  at::parallel_for(0, dim, 64, [&](int64_t begin, int64_t end) {
    std::vector<Acc> sum(static_cast<size_t>(end - begin), Acc(0));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = begin; j < end; ++j)
        sum[static_cast<size_t>(j - begin)] +=
            rms_norm_grad_weight_term(static_cast<Acc>(dy[r * dim + j]), static_cast<Acc>(x[r * dim + j]), inv[r], round);
    std::copy(sum.begin(), sum.end(), dw + begin);
  });
}

void rms_norm_forward_any(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& w, const at::Tensor& h,
                 const at::Tensor& y, const at::Tensor& inv, double eps) {
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  dispatch(
      x, "rms_norm",
      [&] {
        cuda::rms_norm_forward(cuda_dtype(x.scalar_type()), x.data_ptr(), delta.defined() ? delta.data_ptr() : nullptr,
                               w.data_ptr(), h.defined() ? h.data_ptr() : nullptr, y.data_ptr(), inv.data_ptr(), rows,
                               dim, eps, stream_of(x));
      },
      [&](auto tag) {
        using T = decltype(tag);
        using Acc = typename AccOf<T>::type;
        rms_norm_forward_rows<T>(x.data_ptr<T>(), delta.defined() ? delta.data_ptr<T>() : nullptr, w.data_ptr<T>(),
                                 h.defined() ? h.data_ptr<T>() : nullptr, y.data_ptr<T>(), inv.data_ptr<Acc>(), rows,
                                 dim, eps);
      });
}

// Returns the weight's gradient in the accumulation dtype.
at::Tensor rms_norm_backward_any(const at::Tensor& dy, const at::Tensor& dh, const at::Tensor& x, const at::Tensor& w,
                        const at::Tensor& inv, const at::Tensor& dx) {
  const int64_t dim = x.size(-1), rows = x.numel() / dim;
  auto dw = at::empty({dim}, inv.options());
  dispatch(
      x, "rms_norm backward",
      [&] {
        auto partial = at::empty({cuda::rms_norm_backward_blocks(rows), dim}, inv.options());
        cuda::rms_norm_backward(cuda_dtype(x.scalar_type()), dy.data_ptr(), dh.defined() ? dh.data_ptr() : nullptr,
                                x.data_ptr(), w.data_ptr(), inv.data_ptr(), dx.data_ptr(), partial.data_ptr(),
                                dw.data_ptr(), rows, dim, stream_of(x));
      },
      [&](auto tag) {
        using T = decltype(tag);
        using Acc = typename AccOf<T>::type;
        rms_norm_backward_rows<T>(dy.data_ptr<T>(), dh.defined() ? dh.data_ptr<T>() : nullptr, x.data_ptr<T>(),
                                  w.data_ptr<T>(), inv.data_ptr<Acc>(), dx.data_ptr<T>(), dw.data_ptr<Acc>(), rows, dim);
      });
  return dw;
}

void check_norm_inputs(const at::Tensor& x, const at::Tensor& w, const char* op) {
  FS_ASSERT(w.dim() == 1 && w.size(0) == x.size(-1), op, ": weight of ", w.sizes(), " for rows of ", x.size(-1));
  FS_ASSERT(w.scalar_type() == x.scalar_type() && w.device() == x.device(), op, ": weight and input differ in dtype or device");
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w_in, double eps) {
    check_norm_inputs(x_in, w_in, "rms_norm");
    const auto x = x_in.contiguous(), w = w_in.contiguous();
    auto y = at::empty_like(x);
    auto inv = at::empty({x.numel() / x.size(-1)}, x.options().dtype(acc_dtype(x.scalar_type())));
    rms_norm_forward_any(x, at::Tensor(), w, at::Tensor(), y, inv, eps);
    ctx->save_for_backward({x, w, inv});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &inv = saved[2];
    auto dx = at::empty_like(x);
    const auto dw = rms_norm_backward_any(grads[0].contiguous(), at::Tensor(), x, w, inv, dx);
    return {dx, dw.to(w.scalar_type()), at::Tensor()};
  }
};

class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& delta_in,
                               const at::Tensor& w_in, double eps) {
    check_norm_inputs(x_in, w_in, "add_rms_norm");
    FS_ASSERT(x_in.sizes() == delta_in.sizes() && x_in.scalar_type() == delta_in.scalar_type(),
              "add_rms_norm: residual and delta differ");
    const auto x = x_in.contiguous(), delta = delta_in.contiguous(), w = w_in.contiguous();
    auto h = at::empty_like(x);
    auto y = at::empty_like(x);
    auto inv = at::empty({x.numel() / x.size(-1)}, x.options().dtype(acc_dtype(x.scalar_type())));
    rms_norm_forward_any(x, delta, w, h, y, inv, eps);
    ctx->save_for_backward({h, w, inv});
    return {h, y};
  }
  // Both inputs of the add get the same gradient: the residual stream's plus the norm's.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &h = saved[0], &w = saved[1], &inv = saved[2];
    const auto& dh = grads[0];
    if (!grads[1].defined()) return {dh, dh, at::Tensor(), at::Tensor()};
    auto dx = at::empty_like(h);
    const auto dw = rms_norm_backward_any(grads[1].contiguous(), dh.defined() ? dh.contiguous() : dh, h, w, inv, dx);
    return {dx, dx, dw.to(w.scalar_type()), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                double eps) {
  auto out = AddRmsNormFunction::apply(x, delta, weight, eps);
  return {out[0], out[1]};
}

}  // namespace fedshard::kernels
