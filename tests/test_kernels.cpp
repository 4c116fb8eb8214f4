// The fused kernels' CPU loops (src/kernels) against the ATen compositions they replace (src/model/layers.h,
// model::Rope), forward and backward, in float64, float32 and bfloat16 (kernels/tolerance.h); the chunked
// cross-entropy against the whole logits' loss; float8 matmuls against a float64 computation of the same
// quantization; and a whole model with fused kernels against the ATen one. The CUDA kernels, which share the
// per-element arithmetic checked here, are checked against the same compositions on a GPU by bench/kernels.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <torch/version.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <vector>

#include "kernels/cross_entropy.h"
#include "kernels/float8_linear.h"
#include "kernels/fused.h"
#include "kernels/tolerance.h"
#include "model/layers.h"
#include "model/llama.h"
#include "model/rope.h"
#include "util/error.h"

using namespace fedshard;

namespace {

const at::ScalarType kDtypes[] = {at::kDouble, at::kFloat, at::kBFloat16};

// max |got - want| / max |want|, in float64.
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const auto g = got.to(at::kDouble), w = want.to(at::kDouble);
  EXPECT_EQ(g.sizes(), w.sizes());
  const double scale = w.abs().max().item<double>();
  return (g - w).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

void expect_close(const at::Tensor& fused, const at::Tensor& aten, at::ScalarType dtype, bool gradient,
                  const std::string& what) {
  ASSERT_TRUE(fused.defined() && aten.defined()) << what;
  EXPECT_EQ(fused.scalar_type(), aten.scalar_type()) << what;
  const double err = relative_error(fused, aten), tol = kernels::fused_tolerance(dtype, gradient);
  EXPECT_LE(err, tol) << what << " in " << dtype;
  // A tolerance the kernels do not come near would not catch a defect either.
  if (dtype == at::kDouble) EXPECT_LT(err, 1e-13) << what;
}

at::Tensor leaf(std::vector<int64_t> shape, at::ScalarType dtype, uint64_t seed, double scale = 1.0) {
  auto gen = at::detail::createCPUGenerator(seed);
  return (at::randn(shape, gen, at::kDouble) * scale).to(dtype).requires_grad_(true);
}

// d(sum(outputs * upstream))/d(inputs).
std::vector<at::Tensor> grads_of(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& upstream,
                                 const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad(outputs, inputs, upstream, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

model::ModelConfig rope_config() {
  auto c = model::preset("tiny");
  c.dim = 24;
  c.n_heads = 3;
  c.n_kv_heads = 3;
  c.vocab_size = 50;
  return c;
}

}  // namespace

TEST(FusedKernels, RmsNormMatchesAtenForwardAndBackward) {
  for (auto dtype : kDtypes) {
    for (int64_t dim : {70, 256}) {
      const auto x = leaf({2, 5, dim}, dtype, 1), w = leaf({dim}, dtype, 2);
      const auto dy = leaf({2, 5, dim}, dtype, 3).detach();
      const auto a = model::rms_norm(x, w, 1e-5), f = kernels::rms_norm(x, w, 1e-5);
      expect_close(f, a, dtype, false, "rms_norm");
      const auto ga = grads_of({a}, {dy}, {x, w}), gf = grads_of({f}, {dy}, {x, w});
      expect_close(gf[0], ga[0], dtype, true, "rms_norm d/dx");
      expect_close(gf[1], ga[1], dtype, true, "rms_norm d/dw");
    }
  }
}

TEST(FusedKernels, AddRmsNormMatchesAtenForwardAndBackward) {
  for (auto dtype : kDtypes) {
    const int64_t dim = 96;
    const auto x = leaf({3, 4, dim}, dtype, 4), d = leaf({3, 4, dim}, dtype, 5), w = leaf({dim}, dtype, 6);
    const auto dh = leaf({3, 4, dim}, dtype, 7).detach(), dy = leaf({3, 4, dim}, dtype, 8).detach();
    const auto h_a = x + d;
    const auto y_a = model::rms_norm(h_a, w, 1e-6);
    const auto [h_f, y_f] = kernels::add_rms_norm(x, d, w, 1e-6);
    expect_close(h_f, h_a, dtype, false, "residual");
    expect_close(y_f, y_a, dtype, false, "add_rms_norm");
    const auto ga = grads_of({h_a, y_a}, {dh, dy}, {x, d, w}), gf = grads_of({h_f, y_f}, {dh, dy}, {x, d, w});
    expect_close(gf[0], ga[0], dtype, true, "add_rms_norm d/dx");
    expect_close(gf[1], ga[1], dtype, true, "add_rms_norm d/ddelta");
    expect_close(gf[2], ga[2], dtype, true, "add_rms_norm d/dw");
  }
}

// Where only the norm's output is used (the residual's gradient is undefined), and where only the residual is.
TEST(FusedKernels, AddRmsNormWithOneOutputUsed) {
  const auto x = leaf({2, 3, 40}, at::kDouble, 9), d = leaf({2, 3, 40}, at::kDouble, 10), w = leaf({40}, at::kDouble, 11);
  const auto dy = leaf({2, 3, 40}, at::kDouble, 12).detach();
  auto [h, y] = kernels::add_rms_norm(x, d, w, 1e-5);
  const auto g = grads_of({y}, {dy}, {x, d, w});
  const auto want = grads_of({model::rms_norm(x + d, w, 1e-5)}, {dy}, {x, d, w});
  for (int i = 0; i < 3; ++i) expect_close(g[i], want[i], at::kDouble, true, "norm output only");
  auto [h2, y2] = kernels::add_rms_norm(x, d, w, 1e-5);
  const auto g2 = grads_of({h2}, {dy}, {x, d, w});
  expect_close(g2[0], dy, at::kDouble, true, "residual only d/dx");
  expect_close(g2[1], dy, at::kDouble, true, "residual only d/ddelta");
  // (autograd hands the unused output a zero gradient: the weight's is zero)
  EXPECT_EQ(g2[2].abs().max().item<double>(), 0.0);
}

TEST(FusedKernels, RopeMatchesAtenInPlaceForwardAndBackward) {
  const auto cfg = rope_config();
  const model::Rope rope(cfg);
  const int64_t b = 2, t = 5, heads = cfg.n_heads, hd = cfg.head_dim();
  for (auto dtype : kDtypes) {
    for (int64_t start : {0, 7}) {
      const auto x = leaf({b, t, heads * hd}, dtype, 13);
      const auto dy = leaf({b, t, heads, hd}, dtype, 14).detach();
      const auto a = rope.apply(x.view({b, t, heads, hd}), start);
      // The kernel rotates its input in place: a fresh non-leaf, as a projection's output is.
      const auto y = x * 1.0;
      const auto [cos, sin] = rope.tables(y, start);
      const auto f = kernels::rope_(y, cos, sin, hd).view({b, t, heads, hd});
      EXPECT_EQ(f.data_ptr(), y.data_ptr()) << "rotated in place";
      expect_close(f, a, dtype, false, "rope");
      expect_close(grads_of({f}, {dy}, {x})[0], grads_of({a}, {dy}, {x})[0], dtype, true, "rope d/dx");
    }
  }
}

TEST(FusedKernels, SwigluGateMatchesAtenForwardAndBackward) {
  for (auto dtype : kDtypes) {
    const auto g = leaf({4, 3, 50}, dtype, 15, 3.0), u = leaf({4, 3, 50}, dtype, 16);
    const auto dy = leaf({4, 3, 50}, dtype, 17).detach();
    const auto a = model::swiglu_gate(g, u), f = kernels::swiglu_gate(g, u);
    expect_close(f, a, dtype, false, "swiglu_gate");
    const auto ga = grads_of({a}, {dy}, {g, u}), gf = grads_of({f}, {dy}, {g, u});
    expect_close(gf[0], ga[0], dtype, true, "swiglu_gate d/dg");
    expect_close(gf[1], ga[1], dtype, true, "swiglu_gate d/du");
  }
}

TEST(FusedKernels, OtherDtypesAreRefusedInOneLine) {
  const auto x = at::randn({2, 8}).to(at::kHalf), w = at::ones({8}).to(at::kHalf);
  try {
    kernels::rms_norm(x, w, 1e-5);
    FAIL() << "half precision was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32, bfloat16 and float64"), std::string::npos) << e.what();
  }
}

// The chunked loss in float64 against the whole logits' (log_softmax, gather, mean written out), with every chunk
// size from one row to more than all, targets left out by kIgnoreIndex, and both reductions.
TEST(ChunkedCrossEntropy, MatchesTheWholeLogitsLossAndGradientsInFloat64) {
  const int64_t rows = 13, dim = 6, vocab = 11;
  const auto h = leaf({1, rows, dim}, at::kDouble, 20), w = leaf({vocab, dim}, at::kDouble, 21);
  auto targets = at::randint(vocab, {1, rows}, at::detail::createCPUGenerator(22), at::kLong);
  targets[0][3] = kernels::kIgnoreIndex;
  targets[0][9] = kernels::kIgnoreIndex;
  const auto kept = targets.ne(kernels::kIgnoreIndex);
  for (auto reduction : {kernels::Reduction::Mean, kernels::Reduction::Sum}) {
    const auto logp = at::log_softmax(at::matmul(h, w.t()), -1);
    const auto picked = logp.gather(-1, at::where(kept, targets, 0).unsqueeze(-1)).squeeze(-1) * kept;
    const auto want = reduction == kernels::Reduction::Mean ? -picked.sum() / kept.sum() : -picked.sum();
    const auto want_grads = grads_of({want}, {at::ones({}, at::kDouble)}, {h, w});
    for (int64_t chunk : {1, 4, 13, 40}) {
      const auto got = kernels::linear_cross_entropy(h, w, targets, chunk, reduction);
      EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-12) << "chunk " << chunk;
      const auto got_grads = grads_of({got * 2.5}, {at::ones({}, at::kDouble)}, {h, w});
      EXPECT_LT(relative_error(got_grads[0], want_grads[0] * 2.5), 1e-12) << "d/dh, chunk " << chunk;
      EXPECT_LT(relative_error(got_grads[1], want_grads[1] * 2.5), 1e-12) << "d/dw, chunk " << chunk;
    }
  }
}

// In float32 the loss equals model::next_token_loss's within float rounding; without gradients nothing is kept.
TEST(ChunkedCrossEntropy, Float32LossEqualsNextTokenLossWithinRounding) {
  const auto h = leaf({4, 32, 16}, at::kFloat, 23).detach(), w = leaf({300, 16}, at::kFloat, 24).detach();
  const auto targets = at::randint(300, {4, 32}, at::detail::createCPUGenerator(25), at::kLong);
  const double want = model::next_token_loss(at::linear(h, w), targets).item<double>();
  at::NoGradGuard no_grad;
  for (int64_t chunk : {7, 64, 1000})
    EXPECT_NEAR(kernels::linear_cross_entropy(h, w, targets, chunk).item<double>(), want, 1e-6 * want) << chunk;
}

TEST(ChunkedCrossEntropy, ChunkRowsFollowTheModelDim) {
  EXPECT_EQ(kernels::cross_entropy_chunk_rows(64), 64);     // tiny: the floor
  EXPECT_EQ(kernels::cross_entropy_chunk_rows(256), 64);    // small
  EXPECT_EQ(kernels::cross_entropy_chunk_rows(2048), 512);  // Llama 3.2 1B
  EXPECT_EQ(kernels::cross_entropy_chunk_rows(4096), 1024);
  EXPECT_EQ(kernels::cross_entropy_chunk_rows(5120), 1024);  // a power of two at most dim / 4
}

TEST(ChunkedCrossEntropy, SpecsParseOrAreRefused) {
  model::ModelConfig c;
  model::parse_cross_entropy("chunked:24", c);
  EXPECT_TRUE(c.chunked_loss);
  EXPECT_EQ(c.loss_chunk_rows, 24);
  model::parse_cross_entropy("full", c);
  EXPECT_FALSE(c.chunked_loss);
  for (const char* bad : {"chunked:0", "chunked:", "chunked:x", "chunked:3x", "partial", "chunked:-2"})
    EXPECT_THROW(model::parse_cross_entropy(bad, c), Error) << bad;
}

// The float8 linear layer against the same quantization computed here in float64: each operand scaled by
// max / amax, rounded to its float8 type, the products summed in float64 and scaled back.
TEST(Float8Linear, MatchesItsQuantizationComputedInFloat64) {
  if (!kernels::float8_available()) GTEST_SKIP() << "this LibTorch has no _scaled_mm (the CUDA variant checks it)";
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  const auto x = leaf({2, 16, 32}, at::kBFloat16, 30), w = leaf({48, 32}, at::kBFloat16, 31, 0.05);
  const auto dy = leaf({2, 16, 48}, at::kBFloat16, 32, 0.01).detach();
  auto quantized = [](const at::Tensor& t, at::ScalarType type, double max) {
    const auto d = t.detach().to(at::kDouble);
    const double scale = static_cast<double>(static_cast<float>(max / d.abs().max().item<double>()));
    return (d * scale).clamp(-max, max).to(type).to(at::kDouble) / scale;
  };
  const auto xq = quantized(x, at::kFloat8_e4m3fn, kernels::kFloat8E4m3Max);
  const auto wq = quantized(w, at::kFloat8_e4m3fn, kernels::kFloat8E4m3Max);
  const auto gq = quantized(dy, at::kFloat8_e5m2, kernels::kFloat8E5m2Max);
  const auto y = kernels::float8_linear(x, w);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  // The float64 result rounded once to bfloat16: within half a bfloat16 ulp, plus the float32 scale's rounding.
  EXPECT_LT(relative_error(y, at::matmul(xq, wq.t())), 1.0 / 128);
  const auto g = grads_of({y}, {dy}, {x, w});
  EXPECT_LT(relative_error(g[0], at::matmul(gq, wq)), 1.0 / 128);
  EXPECT_LT(relative_error(g[1], at::matmul(gq.reshape({-1, 48}).t(), xq.reshape({-1, 32}))), 1.0 / 128);
  // And float8 is a coarse copy of the bfloat16 layer, not another function: e4m3 has 3 mantissa bits.
  EXPECT_LT(relative_error(y, at::linear(x, w)), 0.15);
#endif
}

// A whole model: model.kernels = fused against aten in float64, logits and every parameter's gradient.
TEST(Model, FusedKernelsGiveTheAtenModelsLogitsAndGradients) {
  auto cfg = model::preset("tiny");
  cfg.vocab_size = 40;
  model::Llama aten(cfg, at::kDouble);
  model::init_parameters(aten, 3);
  auto fused_cfg = cfg;
  fused_cfg.kernels = model::Kernels::Fused;
  model::Llama fused(fused_cfg, at::kDouble);
  const auto a_params = aten.named_parameters(), f_params = fused.named_parameters();
  std::vector<at::Tensor> a_leaves, f_leaves;
  for (size_t i = 0; i < a_params.size(); ++i) {
    *f_params[i].tensor = a_params[i].tensor->detach().clone().requires_grad_(true);
    a_params[i].tensor->requires_grad_(true);
    a_leaves.push_back(*a_params[i].tensor);
    f_leaves.push_back(*f_params[i].tensor);
  }
  const auto tokens = at::randint(40, {2, 9}, at::detail::createCPUGenerator(4), at::kLong);
  const auto la = aten.forward(tokens), lf = fused.forward(tokens);
  EXPECT_LT(relative_error(lf, la), 1e-13);
  const auto up = at::randn(la.sizes(), at::detail::createCPUGenerator(5), at::kDouble);
  const auto ga = grads_of({la}, {up}, a_leaves), gf = grads_of({lf}, {up}, f_leaves);
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_LT(relative_error(gf[i], ga[i]), 1e-12) << a_params[i].name;
}

// Llama::loss (the head's chunked cross-entropy) against next_token_loss of the whole logits.
TEST(Model, ChunkedLossEqualsTheLossOfTheLogits) {
  auto cfg = model::preset("tiny");
  cfg.vocab_size = 40;
  cfg.loss_chunk_rows = 5;
  model::Llama m(cfg, at::kDouble);
  model::init_parameters(m, 6);
  const auto tokens = at::randint(40, {3, 8}, at::detail::createCPUGenerator(7), at::kLong);
  const auto in = tokens.narrow(1, 0, 7), target = tokens.narrow(1, 1, 7);
  EXPECT_NEAR(m.loss(in, target).item<double>(), model::next_token_loss(m.forward(in), target).item<double>(), 1e-12);
}
