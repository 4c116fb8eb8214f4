// Where a rank's tokens come from at each step (DESIGN.md "Data"): for each federation group this rank holds (one
// without emulation), the sampler of its windows and the readers it plays. iid: every rank reads disjoint windows of
// one global stream (rank r takes slot r of each step), so strategies with and without federation read the same
// data; otherwise each group reads its own pool, its ranks taking disjoint slots of it. Under emulation the ranks and
// groups are the virtual ones; with gradient accumulation a reader's slot holds its micro-batches of every step, one
// after the other. Dealt again over the kept groups after a membership change (as a relaunch of them would deal it).
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "data/window_sampler.h"
#include "train/setup.h"

namespace fedshard::train {

class StepData {
 public:
  StepData(const TrainSetup& s, int world_rank);
  size_t groups() const { return samplers_.size(); }  // the federation groups this rank holds
  size_t readers(size_t j) const { return readers_[j].size(); }  // the virtual ranks it plays of held group j
  // The windows reader r of held group j takes at `step`, as one [batch x grad_accum, seq_len + 1] batch.
  at::Tensor batch(int64_t step, size_t j, size_t r) const;

 private:
  std::shared_ptr<data::TokenDataset> train_;
  std::vector<std::shared_ptr<data::WindowSampler>> samplers_;
  std::vector<std::vector<int>> readers_;
};

}  // namespace fedshard::train
