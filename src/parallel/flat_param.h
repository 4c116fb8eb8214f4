// One unit's parameters as one flat buffer: fixed layout (name, shape, offset), padded so it splits evenly
// into shards and aggregation slices; this rank keeps its contiguous shard as the master weight.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

#include "model/llama.h"

namespace fedshard::parallel {

struct FlatEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in elements, into the unpadded flat buffer
  int64_t numel = 0;
};

// Fills `dst` with elements [begin, begin + dst.numel()) of a parameter's flattened initial value (random draws,
// or weights read from a file): a rank only ever produces the part of a parameter it keeps.
using SliceInit = std::function<void(const model::ParamSlot& slot, int64_t begin, at::Tensor dst)>;

class FlatParam {
 public:
  // This rank's shard (padding zero) is filled by `init`, slot by slot; the slots stay unbound.
  // pad_multiple: the padded length is a multiple of it (and of shard_count). Without with_grad (a
  // forward-only model) there is no gradient buffer.
  FlatParam(std::vector<model::ParamSlot> slots, int64_t pad_multiple, int shard_count, int shard_index,
            at::ScalarType master_dtype, const SliceInit& init, at::Device device = at::kCPU, bool with_grad = true);

  const std::vector<FlatEntry>& entries() const { return entries_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  int64_t shard_numel() const { return padded_numel_ / shard_count_; }
  int64_t shard_offset() const { return shard_numel() * shard_index_; }
  int shard_count() const { return shard_count_; }

  at::Tensor& shard() { return shard_; }  // master weight slice [shard_numel], a leaf that requires grad
  at::Tensor& grad() { return grad_; }    // reduced gradient of the slice [shard_numel]

  // Point every slot at its view of `full` (padded_numel elements), or release them.
  void bind(const at::Tensor& full);
  void unbind();
  // Bind every slot to a fresh leaf that requires grad and shares `full`'s storage; returns the leaves in
  // entry order, so autograd yields one gradient per parameter (no full-size zero fills per view).
  std::vector<at::Tensor> bind_leaves(const at::Tensor& full);
  // Per-entry gradients (undefined = unused, zero) -> one padded flat gradient in `dtype`, on the shard's device.
  at::Tensor flatten(const std::vector<at::Tensor>& grads, at::ScalarType dtype) const;
  // The same written into `out` (padded_numel elements), e.g. the master gradient where nothing is scattered.
  void flatten_into(const std::vector<at::Tensor>& grads, at::Tensor& out) const;

  // Concatenated full values of this rank's shard from a full flat buffer (for tests and checkpoints).
  at::Tensor slice_of(const at::Tensor& full) const { return full.narrow(0, shard_offset(), shard_numel()); }

 private:
  std::vector<model::ParamSlot> slots_;
  std::vector<FlatEntry> entries_;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  int shard_count_ = 1;
  int shard_index_ = 0;
  at::Tensor shard_;
  at::Tensor grad_;
};

}  // namespace fedshard::parallel
