#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fedshard::plan {

namespace {

// Elements of each FlatParam as the engine groups the units: a tied head joins the embedding's.
std::vector<double> flat_sizes(const model::ModelConfig& c) {
  const double emb = static_cast<double>(c.embedding_params());
  const double head = static_cast<double>(c.head_params());
  std::vector<double> out;
  out.push_back(c.tie_embeddings ? emb + head : emb);
  for (int64_t i = 0; i < c.n_layers; ++i) out.push_back(static_cast<double>(c.params_per_block()));
  if (!c.tie_embeddings) out.push_back(head);
  return out;
}

bool fits(const MemoryInputs& in, double available) { return estimate_memory(in).total() <= available; }

}  // namespace

double MemoryEstimate::total() const {
  double t = 0;
  for (const auto& c : components) t += c.bytes;
  return t;
}

double MemoryEstimate::bytes(const std::string& name) const {
  for (const auto& c : components)
    if (c.name == name) return c.bytes;
  return 0;
}

MemoryEstimate estimate_memory(const MemoryInputs& in) {
  const auto& c = in.model;
  const auto flats = flat_sizes(c);
  const double all = std::accumulate(flats.begin(), flats.end(), 0.0);
  const double largest = *std::max_element(flats.begin(), flats.end());
  double shard = 0;  // this rank's elements, each flat padded to split evenly
  for (double f : flats) shard += std::ceil(f / in.shard);
  const double slice = shard / in.replicas;
  const double m = in.master_bytes, cb = in.compute_bytes, held = in.groups_per_rank;

  const double optimizer_buffers = in.optimizer == "adamw" ? 2.0 : (in.momentum > 0 ? 1.0 : 0.0);
  double federation = 0;
  if (in.federated)
    federation = slice * m * ((in.outer == "nesterov" ? 2.0 : 0.0) + (in.round_copy ? 1.0 : 0.0) +
                              (in.residuals ? 2.0 : 0.0));

  // Full parameters in compute dtype. Unsharded in the master dtype, the "gathered" unit is the master itself.
  // With recomputation and resharding a unit is freed after its forward: the one computing and the one being
  // prefetched are gathered (a tied flat, used at two call sites, stays gathered all step). Otherwise every
  // unit stays gathered from its forward to its backward.
  double gathered = 0;
  if (in.shard > 1 || in.compute_bytes != in.master_bytes) {
    if (in.recompute && in.reshard_after_forward) {
      std::vector<double> others(flats.begin() + (c.tie_embeddings ? 1 : 0), flats.end());
      std::sort(others.rbegin(), others.rend());
      gathered = cb * ((c.tie_embeddings ? flats.front() : 0.0) + (others.empty() ? 0.0 : others[0]) +
                       (others.size() > 1 ? others[1] : 0.0));
      // Sharded, each unit's cast of its shard is kept from its forward to its backward's re-gather.
      if (in.shard > 1 && in.compute_bytes != in.master_bytes) gathered += cb * shard;
    } else {
      gathered = all * cb;
    }
  }
  // A unit's full gradient is flattened for its reduction while the previous unit's may still be in flight;
  // gradient accumulation keeps a float32 sum of every unit's.
  const double grad_buffers = 2.0 * largest * std::max(in.reduce_bytes, c.tie_embeddings ? 4 : in.reduce_bytes) +
                              (in.grad_accum > 1 ? all * 4.0 : 0.0);

  // Activations of one micro-batch, per token, in elements (what autograd keeps of a block: norms' inputs and
  // outputs, q/k/v before and after RoPE, the attention output, the SwiGLU's four hidden-size tensors; the
  // math kernel adds the scores, masked scores and probabilities, T per head each, and repeats grouped K/V).
  const double dim = static_cast<double>(c.dim), kv = static_cast<double>(c.n_kv_heads * c.head_dim());
  const double t = static_cast<double>(in.seq_len), tokens = static_cast<double>(in.batch) * t;
  double block = 14.0 * dim + 4.0 * kv + 4.0 * static_cast<double>(c.ffn_hidden_dim());
  if (in.math_attention) block += 3.0 * static_cast<double>(c.n_heads) * t + (c.n_kv_heads < c.n_heads ? 2.0 * dim : 0.0);
  // The head's logits at once: in compute dtype, their float32 copy and log-softmax for the loss, per token.
  // Chunked (kernels/cross_entropy.h): one chunk's logits in compute dtype, in the float32 (float64) accumulation
  // dtype and their gradient back in compute dtype (one buffer when the two dtypes are one), beside the weight's
  // gradient summed in the accumulation dtype and the hidden states' gradient.
  const double vocab = static_cast<double>(c.vocab_size);
  const double head = c.chunked_loss ? 0.0 : vocab * (cb + 8.0);
  double head_chunks = 0;
  if (c.chunked_loss) {
    const double acc = cb == 8 ? 8.0 : 4.0;
    const double rows = static_cast<double>(c.loss_rows());
    head_chunks = std::min(rows, tokens) * vocab * (acc + (cb == acc ? 0.0 : 2.0 * cb)) +
                  vocab * static_cast<double>(c.dim) * acc + tokens * static_cast<double>(c.dim) * cb;
  }
  const double layers = static_cast<double>(c.n_layers);
  // In a block's backward its gradients are in flight beside what it kept: those of the scores and
  // probabilities (math kernel), of the residual stream and of the SwiGLU's hidden tensors.
  double backward = 2.0 * dim + 2.0 * static_cast<double>(c.ffn_hidden_dim());
  if (in.math_attention) backward += 2.0 * static_cast<double>(c.n_heads) * t;
  // Recomputation keeps each unit's input and rebuilds one unit's graph at a time in backward.
  const double activations =
      head_chunks + (in.recompute ? tokens * ((layers + 2.0) * dim * cb + (block + backward) * cb + head)
                                  : tokens * ((layers * block + backward + dim) * cb + head));

  MemoryEstimate e;
  e.components = {{"master", held * shard * m},
                  {"gradients", shard * m},
                  {"optimizer", held * optimizer_buffers * shard * m},
                  {"federation", held * federation},
                  {"gathered", gathered},
                  {"gradient_buffers", grad_buffers},
                  {"activations", activations},
                  {"runtime", in.runtime_bytes}};
  return e;
}

std::vector<std::string> memory_suggestions(const MemoryInputs& in, double available, int group_size) {
  std::vector<std::string> out;
  if (in.shard < group_size) {
    auto v = in;
    v.shard = group_size;
    v.replicas = 1;
    v.recompute = true;
    if (fits(v, available))
      out.push_back("use fsdp (the model sharded over the group's " + std::to_string(group_size) + " ranks)");
  }
  if (!in.recompute) {
    auto v = in;
    v.recompute = true;
    if (fits(v, available)) out.push_back("turn on recomputation (--set parallel.activation_checkpointing=on)");
  }
  // The largest batch that fits (the estimate grows with the batch).
  auto with_batch = [&](int64_t b) {
    auto v = in;
    v.batch = b;
    return v;
  };
  if (in.batch > 1 && fits(with_batch(1), available)) {
    int64_t lo = 1, hi = in.batch - 1;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(with_batch(mid), available))
        lo = mid;
      else
        hi = mid - 1;
    }
    out.push_back("--batch-size " + std::to_string(lo) + " or less (--grad-accum keeps the batch per step)");
  }
  if (out.size() > 3) out.resize(3);
  return out;
}

}  // namespace fedshard::plan
