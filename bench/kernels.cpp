// The fused kernels, the chunked cross-entropy and the float8 linear layer against the ATen compositions they
// replace, on the device: for each, the largest relative difference of every output and gradient against its
// tolerance (kernels/tolerance.h) and the forward + backward time of both, at the sizes of the GPU benchmark's
// shapes (bench/gpu/device-check.sh, phase "kernels"), with the caching allocator's peak over the timed runs
// (inputs included) on a GPU. Exits 1 when a check fails.
//
// Usage: bench_kernels [--device cuda|cpu] [--shapes 1b,8b4] [--iters N] [--json FILE]
//   shapes: 1b (Llama-3.2-1B, 4 x 2048 tokens), 8b4 (Llama-3.1-8B, 2 x 2048), tiny (a CPU dry run)
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cross_entropy.h"
#include "kernels/float8_linear.h"
#include "kernels/fused.h"
#include "kernels/tolerance.h"
#include "model/layers.h"
#include "model/llama.h"
#include "model/rope.h"
#include "util/build_info.h"

#ifdef FEDSHARD_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

using namespace fedshard;

namespace {

struct Shape {
  std::string name;
  int64_t batch, seq, dim, heads, kv_heads, ffn, vocab;
  int64_t rows() const { return batch * seq; }
  int64_t head_dim() const { return dim / heads; }
};

const std::vector<Shape> kShapes = {
    {"1b", 4, 2048, 2048, 32, 8, 8192, 128256},
    {"8b4", 2, 2048, 4096, 32, 8, 14336, 128256},
    {"tiny", 2, 64, 256, 8, 4, 704, 1024},
};

struct Row {
  std::string shape, op, dtype;
  double error = 0, tolerance = 0, aten_ms = 0, fused_ms = 0, aten_peak_mb = -1, fused_peak_mb = -1;
  bool ok() const { return error <= tolerance; }
};

void synchronize(const at::Device& d) {
#ifdef FEDSHARD_CUDA
  if (d.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)d;
#endif
}

void reset_peak(const at::Device& d) {
#ifdef FEDSHARD_CUDA
  if (d.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(d.index());
#else
  (void)d;
#endif
}

// Peak bytes the caching allocator held since reset_peak, above `base`; -1 on the CPU.
double peak_mb(const at::Device& d) {
#ifdef FEDSHARD_CUDA
  if (d.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
    return static_cast<double>(stats.allocated_bytes[0].peak) / (1 << 20);
  }
#else
  (void)d;
#endif
  return -1;
}

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const auto g = got.to(at::kDouble), w = want.to(at::kDouble);
  const double scale = w.abs().max().item<double>();
  return (g - w).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// Median milliseconds of fn over iters runs after one warm-up, the device synchronized around each.
double time_ms(const at::Device& d, int iters, const std::function<void()>& fn) {
  fn();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    synchronize(d);
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    synchronize(d);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

at::Tensor random(std::vector<int64_t> shape, at::ScalarType dtype, const at::Device& d, double scale = 1.0) {
  return (at::randn(shape, at::TensorOptions().device(d)) * scale).to(dtype).requires_grad_(true);
}

std::vector<at::Tensor> grads(const std::vector<at::Tensor>& out, const std::vector<at::Tensor>& up,
                              const std::vector<at::Tensor>& in) {
  return torch::autograd::grad(out, in, up, false, false, true);
}

// One operation: `run` maps the inputs to its outputs, once with ATen and once fused; the error is the largest
// over outputs and input gradients (upstream gradients random).
struct Case {
  std::string op;
  std::vector<at::Tensor> inputs;
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&, bool fused)> run;
};

Row check(const Shape& s, const Case& c, at::ScalarType dtype, const at::Device& d, int iters) {
  Row r{s.name, c.op, dtype == at::kBFloat16 ? "bfloat16" : "float32"};
  const auto a = c.run(c.inputs, false), f = c.run(c.inputs, true);
  std::vector<at::Tensor> up;
  for (const auto& o : a) up.push_back(at::randn_like(o));
  const auto ga = grads(a, up, c.inputs), gf = grads(f, up, c.inputs);
  double value_err = 0, grad_err = 0;
  for (size_t i = 0; i < a.size(); ++i) value_err = std::max(value_err, relative_error(f[i], a[i]));
  for (size_t i = 0; i < ga.size(); ++i)
    if (ga[i].defined()) grad_err = std::max(grad_err, relative_error(gf[i], ga[i]));
  // The tighter of the two tolerances that fails decides: reported as error / tolerance against 1.
  const double tv = kernels::fused_tolerance(dtype, false), tg = kernels::fused_tolerance(dtype, true);
  r.tolerance = 1.0;
  r.error = std::max(value_err / tv, grad_err / tg);
  for (bool fused : {false, true}) {
    reset_peak(d);
    const double ms = time_ms(d, iters, [&] {
      const auto out = c.run(c.inputs, fused);
      grads(out, up, c.inputs);
    });
    (fused ? r.fused_ms : r.aten_ms) = ms;
    (fused ? r.fused_peak_mb : r.aten_peak_mb) = peak_mb(d);
  }
  return r;
}

std::vector<Case> cases(const Shape& s, at::ScalarType dtype, const at::Device& d, const model::Rope& rope) {
  const double eps = 1e-5;
  const int64_t hd = s.head_dim();
  std::vector<Case> out;
  out.push_back({"rms_norm", {random({s.rows(), s.dim}, dtype, d), random({s.dim}, dtype, d)},
                 [eps](const std::vector<at::Tensor>& in, bool fused) -> std::vector<at::Tensor> {
                   return {fused ? kernels::rms_norm(in[0], in[1], eps) : model::rms_norm(in[0], in[1], eps)};
                 }});
  out.push_back({"add_rms_norm",
                 {random({s.rows(), s.dim}, dtype, d), random({s.rows(), s.dim}, dtype, d), random({s.dim}, dtype, d)},
                 [eps](const std::vector<at::Tensor>& in, bool fused) -> std::vector<at::Tensor> {
                   if (fused) {
                     auto [h, y] = kernels::add_rms_norm(in[0], in[1], in[2], eps);
                     return {h, y};
                   }
                   const auto h = in[0] + in[1];
                   return {h, model::rms_norm(h, in[2], eps)};
                 }});
  out.push_back({"rope", {random({s.batch, s.seq, s.heads * hd}, dtype, d)},
                 [&rope, s, hd](const std::vector<at::Tensor>& in, bool fused) -> std::vector<at::Tensor> {
                   const auto y = in[0] * 1.0;  // a fresh non-leaf, as a projection's output is
                   if (!fused) return {rope.apply(y.view({s.batch, s.seq, s.heads, hd}))};
                   const auto [cos, sin] = rope.tables(y);
                   return {kernels::rope_(y, cos, sin, hd).view({s.batch, s.seq, s.heads, hd})};
                 }});
  out.push_back({"swiglu_gate", {random({s.rows(), s.ffn}, dtype, d, 3.0), random({s.rows(), s.ffn}, dtype, d)},
                 [](const std::vector<at::Tensor>& in, bool fused) -> std::vector<at::Tensor> {
                   return {fused ? kernels::swiglu_gate(in[0], in[1]) : model::swiglu_gate(in[0], in[1])};
                 }});
  const auto targets = at::randint(s.vocab, {s.rows()}, at::TensorOptions().dtype(at::kLong).device(d));
  const int64_t chunk = kernels::cross_entropy_chunk_rows(s.dim);
  out.push_back({"cross_entropy", {random({s.rows(), s.dim}, dtype, d), random({s.vocab, s.dim}, dtype, d, 0.02)},
                 [targets, chunk](const std::vector<at::Tensor>& in, bool fused) -> std::vector<at::Tensor> {
                   if (fused) return {kernels::linear_cross_entropy(in[0], in[1], targets, chunk)};
                   return {model::next_token_loss(at::linear(in[0], in[1]), targets)};
                 }});
  return out;
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define FEDSHARD_BENCH_FLOAT8 1
// float8 against bfloat16 for the largest linear layer of the shape (w1: dim -> ffn): time, and the difference
// from its own quantization computed in float32 (tolerance 1/128: the float32 result rounded once to bfloat16).
Row float8_row(const Shape& s, const at::Device& d, int iters) {
  Row r{s.name, "float8_linear", "bfloat16"};
  const auto x = random({s.rows(), s.dim}, at::kBFloat16, d), w = random({s.ffn, s.dim}, at::kBFloat16, d, 0.02);
  const auto y = kernels::float8_linear(x, w);
  auto dequantized = [](const at::Tensor& t) {
    const auto f = t.detach().to(at::kFloat);
    const auto scale = kernels::kFloat8E4m3Max / f.abs().max().clamp_min(1e-12);
    return (f * scale).clamp(-kernels::kFloat8E4m3Max, kernels::kFloat8E4m3Max).to(at::kFloat8_e4m3fn).to(at::kFloat) /
           scale;
  };
  r.error = relative_error(y, at::matmul(dequantized(x), dequantized(w).t()));
  r.tolerance = 1.0 / 128;
  const auto up = at::randn_like(y);
  r.aten_ms = time_ms(d, iters, [&] { grads({at::linear(x, w)}, {up}, {x, w}); });
  r.fused_ms = time_ms(d, iters, [&] { grads({kernels::float8_linear(x, w)}, {up}, {x, w}); });
  return r;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cuda", shapes = "1b,8b4", json;
  int iters = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device") device = v;
    else if (k == "--shapes") shapes = v;
    else if (k == "--iters") iters = std::stoi(v);
    else if (k == "--json") json = v;
    else {
      std::cerr << "bench_kernels: unknown flag " << k << "\n";
      return 2;
    }
  }
  const at::Device d(device == "cuda" ? at::kCUDA : at::kCPU);
  if (d.is_cuda() && visible_gpus() == 0) {
    std::cerr << "bench_kernels: --device cuda but no GPU (" << build_description() << ")\n";
    return 2;
  }
  const bool float8 = kernels::float8_available() && d.is_cuda() && gpu_compute_capability(0) >= 89;
  std::vector<Row> rows;
  std::printf("%-5s %-14s %-9s %10s %9s %9s %7s %9s %9s\n", "shape", "op", "dtype", "err/tol", "aten ms", "fused ms",
              "speedup", "aten MB", "fused MB");
  for (const auto& s : kShapes) {
    if (("," + shapes + ",").find("," + s.name + ",") == std::string::npos) continue;
    auto cfg = model::preset("tiny");
    cfg.dim = s.dim;
    cfg.n_heads = s.heads;
    cfg.n_kv_heads = s.kv_heads;
    cfg.rope_theta = 500000.0;
    cfg.max_seq_len = s.seq;
    const model::Rope rope(cfg);
    std::vector<Row> shape_rows;
    for (auto dtype : {at::kBFloat16, at::kFloat})
      for (const auto& c : cases(s, dtype, d, rope)) shape_rows.push_back(check(s, c, dtype, d, iters));
#ifdef FEDSHARD_BENCH_FLOAT8
    if (float8) shape_rows.push_back(float8_row(s, d, iters));
#endif
    for (const auto& r : shape_rows) {
      std::printf("%-5s %-14s %-9s %10.3g %9.3f %9.3f %7.2f %9.0f %9.0f %s\n", r.shape.c_str(), r.op.c_str(),
                  r.dtype.c_str(), r.error / r.tolerance, r.aten_ms, r.fused_ms, r.aten_ms / r.fused_ms,
                  r.aten_peak_mb, r.fused_peak_mb, r.ok() ? "ok" : "FAIL");
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  if (!float8) std::printf("float8_linear: not run (%s)\n", d.is_cuda() ? "no _scaled_mm or a GPU below 8.9" : "CPU");
  bool ok = true;
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    ok = ok && r.ok();
    out << (i ? ",\n" : "\n") << "{\"shape\":\"" << r.shape << "\",\"op\":\"" << r.op << "\",\"dtype\":\"" << r.dtype
        << "\",\"error\":" << r.error << ",\"tolerance\":" << r.tolerance << ",\"aten_ms\":" << r.aten_ms
        << ",\"fused_ms\":" << r.fused_ms << ",\"aten_peak_mb\":" << r.aten_peak_mb
        << ",\"fused_peak_mb\":" << r.fused_peak_mb << ",\"ok\":" << (r.ok() ? "true" : "false") << "}";
  }
  out << "\n]\n";
  if (!json.empty()) std::ofstream(json) << out.str();
  std::printf("%s\n", ok ? "every check passed" : "a check FAILED");
  return ok ? 0 : 1;
}

#undef FEDSHARD_BENCH_FLOAT8
