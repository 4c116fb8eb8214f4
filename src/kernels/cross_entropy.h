// The output head's matmul and the next-token cross-entropy in chunks of rows (Liger's "fused linear
// cross-entropy"), so that the [tokens, vocab] logits never exist at once: each chunk's logits are made in the
// compute dtype, upcast to float32 (float64 stays float64) as model::next_token_loss does, reduced to the loss and,
// when gradients are wanted, turned into the chunk's input gradient and added into the weight's gradient right
// away. The weight's gradient is summed in float32 (float64 for float64).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace fedshard::kernels {

enum class Reduction { Mean, Sum };

// Targets equal to this are left out of the loss and its mean (PyTorch's default ignore_index).
constexpr int64_t kIgnoreIndex = -100;

// h [..., dim], weight [vocab, dim], targets [...] (int64). Mean (over targets that are not kIgnoreIndex) or sum
// of -log softmax(h weight^T)[target]. rows: rows per chunk (>= 1).
at::Tensor linear_cross_entropy(const at::Tensor& h, const at::Tensor& weight, const at::Tensor& targets, int64_t rows,
                                Reduction reduction = Reduction::Mean);

// The chunk rows model.cross_entropy = chunked takes: the largest power of two <= max(64, dim / 4). A chunk's
// float32 logits then hold vocab * dim bytes at most, half the head weight's bfloat16 bytes, and each chunk's
// matmuls have at least 64 rows (a chunk below that costs more in the weight gradient's read-modify-write than
// its matmul does; docs/perf.md).
int64_t cross_entropy_chunk_rows(int64_t dim);

}  // namespace fedshard::kernels
