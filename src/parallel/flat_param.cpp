#include "parallel/flat_param.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace fedshard::parallel {

FlatParam::FlatParam(std::vector<model::ParamSlot> slots, int64_t pad_multiple, int shard_count, int shard_index,
                     at::ScalarType master_dtype, const SliceInit& init, at::Device device, bool with_grad)
    : slots_(std::move(slots)), shard_count_(shard_count), shard_index_(shard_index) {
  FS_ASSERT(pad_multiple > 0 && pad_multiple % shard_count == 0, "pad multiple ", pad_multiple,
            " must be a multiple of the shard count ", shard_count);
  for (const auto& s : slots_) {
    FlatEntry e{s.name, s.shape, numel_, 1};
    for (int64_t d : s.shape) e.numel *= d;
    numel_ += e.numel;
    entries_.push_back(e);
  }
  padded_numel_ = (numel_ + pad_multiple - 1) / pad_multiple * pad_multiple;

  // Fill the slice [shard_offset, shard_offset + shard_numel) of the concatenated values.
  at::NoGradGuard no_grad;
  shard_ = at::zeros({shard_numel()}, at::TensorOptions().dtype(master_dtype).device(device));
  const int64_t lo = shard_offset(), hi = lo + shard_numel();
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto& e = entries_[i];
    const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.numel);
    if (a < b) init(slots_[i], a - e.offset, shard_.narrow(0, a - lo, b - a));
  }
  shard_.requires_grad_(true);
  if (with_grad) grad_ = at::zeros_like(shard_);
  unbind();
}

void FlatParam::bind(const at::Tensor& full) {
  FS_ASSERT(full.numel() == padded_numel_, "bind: got ", full.numel(), " elements, expected ", padded_numel_);
  for (size_t i = 0; i < slots_.size(); ++i)
    *slots_[i].tensor = full.narrow(0, entries_[i].offset, entries_[i].numel).view(entries_[i].shape);
}

std::vector<at::Tensor> FlatParam::bind_leaves(const at::Tensor& full) {
  FS_ASSERT(full.numel() == padded_numel_, "bind_leaves: got ", full.numel(), " elements, expected ", padded_numel_);
  std::vector<at::Tensor> leaves;
  leaves.reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto leaf = full.narrow(0, entries_[i].offset, entries_[i].numel).view(entries_[i].shape).detach();
    leaf.requires_grad_(true);
    *slots_[i].tensor = leaf;
    leaves.push_back(leaf);
  }
  return leaves;
}

at::Tensor FlatParam::flatten(const std::vector<at::Tensor>& grads, at::ScalarType dtype) const {
  auto flat = at::empty({padded_numel_}, at::TensorOptions().dtype(dtype).device(shard_.device()));
  flatten_into(grads, flat);
  return flat;
}

void FlatParam::flatten_into(const std::vector<at::Tensor>& grads, at::Tensor& out) const {
  FS_ASSERT(grads.size() == entries_.size(), "flatten: ", grads.size(), " grads for ", entries_.size(), " entries");
  FS_ASSERT(out.numel() == padded_numel_, "flatten: into ", out.numel(), " elements, expected ", padded_numel_);
  for (size_t i = 0; i < grads.size(); ++i) {
    auto dst = out.narrow(0, entries_[i].offset, entries_[i].numel);
    if (grads[i].defined())
      dst.copy_(grads[i].reshape({-1}));
    else
      dst.zero_();
  }
  out.narrow(0, numel_, padded_numel_ - numel_).zero_();
}

void FlatParam::unbind() {
  for (auto& s : slots_) *s.tensor = at::Tensor();
}

}  // namespace fedshard::parallel
