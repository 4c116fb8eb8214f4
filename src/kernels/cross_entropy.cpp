#include "kernels/cross_entropy.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <algorithm>

#include "util/error.h"

namespace fedshard::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// grad_weight += a^T b in grad_weight's dtype (wider than a and b under bfloat16 compute).
void add_outer(at::Tensor& grad_weight, const at::Tensor& a, const at::Tensor& b) {
  if (grad_weight.scalar_type() == a.scalar_type()) {
    grad_weight.addmm_(a.t(), b);
    return;
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
  // cuBLAS multiplies bfloat16 into a float32 sum directly: no bfloat16 product to round and add.
  if (a.is_cuda()) {
    at::addmm_out(grad_weight, grad_weight, a.t(), b, grad_weight.scalar_type());
    return;
  }
#endif
  grad_weight.add_(at::mm(a.t(), b));
}

class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h_in, const at::Tensor& weight,
                            const at::Tensor& targets_in, int64_t rows, int64_t reduction) {
    const int64_t dim = h_in.size(-1);
    const auto h = h_in.reshape({-1, dim});
    const auto targets = targets_in.reshape({-1});
    FS_ASSERT(targets.numel() == h.size(0) && weight.dim() == 2 && weight.size(1) == dim && rows > 0,
              "linear_cross_entropy: ", h_in.sizes(), " rows, ", weight.sizes(), " weight, ", targets_in.sizes(),
              " targets");
    const auto acc = at::promote_types(h.scalar_type(), at::kFloat);
    const bool mean = reduction == static_cast<int64_t>(Reduction::Mean);
    const bool want_h = h_in.requires_grad(), want_w = weight.requires_grad();
    const auto valid = targets.ne(kIgnoreIndex);
    // The mean's divisor stays on the device: reading it would cost a host sync per step.
    const auto scale = mean ? valid.sum().to(acc).reciprocal() : at::ones({}, h.options().dtype(acc));
    auto loss = at::zeros({}, h.options().dtype(acc));
    at::Tensor grad_h, grad_w;
    if (want_h) grad_h = at::empty_like(h);
    if (want_w) grad_w = at::zeros(weight.sizes(), weight.options().dtype(acc));
    const int64_t n = h.size(0);
    for (int64_t r0 = 0; r0 < n; r0 += rows) {
      const int64_t r = std::min(rows, n - r0);
      const auto hc = h.narrow(0, r0, r);
      const auto tc = targets.narrow(0, r0, r);
      const auto vc = valid.narrow(0, r0, r);
      const auto logits = at::mm(hc, weight.t()).to(acc);
      const auto lse = at::logsumexp(logits, {1});
      const auto safe = at::where(vc, tc, at::zeros_like(tc)).unsqueeze(1);
      loss += ((lse - logits.gather(1, safe).squeeze(1)) * vc).sum();
      if (!want_h && !want_w) continue;
      // d loss / d logits = (softmax - one_hot(target)) * scale on the rows that count, built in place.
      auto d = logits.sub_(lse.unsqueeze(1)).exp_();
      d.scatter_add_(1, safe, at::full({r, 1}, -1.0, d.options()));
      d.mul_((vc.to(acc) * scale).unsqueeze(1));
      const auto dc = d.to(h.scalar_type());
      if (want_h) {
        auto out = grad_h.narrow(0, r0, r);
        at::mm_out(out, dc, weight);
      }
      if (want_w) add_outer(grad_w, dc, hc);
    }
    ctx->saved_data["grad_h"] = grad_h;
    ctx->saved_data["grad_w"] = grad_w;
    ctx->saved_data["h_shape"] = h_in.sizes().vec();
    return loss * scale;
  }

  // The gradients were made in forward; backward scales them by the loss's own gradient.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = grads[0];
    at::Tensor grad_h = ctx->saved_data["grad_h"].toTensor(), grad_w = ctx->saved_data["grad_w"].toTensor();
    if (grad_h.defined()) grad_h = grad_h.mul_(g.to(grad_h.scalar_type())).view(ctx->saved_data["h_shape"].toIntVector());
    if (grad_w.defined()) grad_w = grad_w.mul_(g.to(grad_w.scalar_type()));
    return {grad_h, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_cross_entropy(const at::Tensor& h, const at::Tensor& weight, const at::Tensor& targets, int64_t rows,
                                Reduction reduction) {
  return LinearCrossEntropy::apply(h, weight, targets, rows, static_cast<int64_t>(reduction));
}

int64_t cross_entropy_chunk_rows(int64_t dim) {
  const int64_t limit = std::max<int64_t>(64, dim / 4);
  int64_t rows = 1;
  while (rows * 2 <= limit) rows *= 2;
  return rows;
}

}  // namespace fedshard::kernels
