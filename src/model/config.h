// Llama-3 architecture hyperparameters and the named presets. Pure arithmetic: nothing here allocates
// tensors, so parameter counts of 70B models are computed without building them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fedshard::model {

// Llama 3.1 "rope_scaling" (wavelength-dependent frequency division for long context).
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

// How the attention core is computed (not part of the architecture): sdpa = at::scaled_dot_product_attention
// (flash / cuDNN / memory-efficient kernels on CUDA, a fused kernel on CPU; LibTorch >= 2.0), math = explicit
// softmax(QK^T / sqrt(d)) V. Auto: sdpa where the LibTorch has it.
enum class AttentionKernel { Auto, Sdpa, Math };

// What computes a block's norms, rotary embedding and SwiGLU gate (not part of the architecture either): the ATen
// compositions of model/layers.h, or the fused kernels of src/kernels (a CUDA kernel each; on the CPU a loop over
// the same arithmetic).
enum class Kernels { Aten, Fused };

// The dtype of the blocks' linear layers' matmuls: the compute dtype, or float8 with per-tensor scales
// (kernels/float8_linear.h). The embedding and the output head stay in the compute dtype.
enum class MatmulDtype { Compute, Float8 };

struct ModelConfig {
  std::string name;
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;  // 0: taken from the tokenizer of the data (tiny/small presets)
  int64_t multiple_of = 256;
  std::optional<double> ffn_dim_multiplier;
  int64_t ffn_hidden = 0;  // SwiGLU hidden size as given (HF intermediate_size); 0: from multiple_of and the multiplier
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  std::optional<RopeScaling> rope_scaling;
  int64_t max_seq_len = 2048;
  bool tie_embeddings = false;
  AttentionKernel attention = AttentionKernel::Auto;
  Kernels kernels = Kernels::Aten;
  MatmulDtype matmul = MatmulDtype::Compute;
  // The head's cross-entropy in chunks of this many rows, so the whole [tokens, vocab] logits never exist
  // (kernels/cross_entropy.h); 0: kernels::cross_entropy_chunk_rows(dim). Not chunked: the logits made at once.
  bool chunked_loss = true;
  int64_t loss_chunk_rows = 0;

  int64_t head_dim() const { return dim / n_heads; }
  // The chunk rows of a chunked cross-entropy: loss_chunk_rows, else kernels::cross_entropy_chunk_rows(dim).
  int64_t loss_rows() const;
  // ffn_hidden, else Llama's SwiGLU hidden size: 2/3 of 4*dim, times the multiplier, rounded up to multiple_of.
  int64_t ffn_hidden_dim() const;
  int64_t params_per_block() const;
  int64_t embedding_params() const { return vocab_size * dim; }
  int64_t head_params() const { return dim + (tie_embeddings ? 0 : vocab_size * dim); }
  int64_t param_count() const;
  // Forward FLOPs per token for a sequence of seq_len (matmuls + attention scores), the usual 2*params rule
  // plus the attention term; training is ~3x this (x4 with recomputation).
  double forward_flops_per_token(int64_t seq_len) const;

  // Throws fedshard::Error naming the first inconsistent field.
  void validate() const;
};

// "" when a and b are the same architecture (shapes, norm, RoPE, tying), else the first field that differs,
// e.g. "ffn hidden 172 vs 192".
std::string architecture_difference(const ModelConfig& a, const ModelConfig& b);

// Presets: tiny, small, llama3.2-1b, llama3.1-8b, llama3.1-70b. Throws fedshard::Error on an unknown name.
ModelConfig preset(const std::string& name);
std::vector<std::string> preset_names();

// Human-readable architecture summary (used by `fedshard info`).
std::string describe(const ModelConfig& cfg);

// 8030261248 -> "8,030,261,248".
std::string with_commas(int64_t n);

}  // namespace fedshard::model
