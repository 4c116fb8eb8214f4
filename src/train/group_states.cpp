#include "train/group_states.h"

#include <ATen/core/grad_mode.h>

namespace fedshard::train {

GroupStates::GroupStates(int groups, parallel::ShardedModel& model, optim::Optimizer& opt)
    : model_(model), opt_(opt), groups_(static_cast<size_t>(groups)) {
  for (int g = 0; g < groups; ++g) save(g);
}

RankState GroupStates::live() const { return rank_state(model_, opt_, nullptr); }

void GroupStates::save(int g) {
  at::NoGradGuard no_grad;
  auto& st = groups_.at(static_cast<size_t>(g));
  const auto now = live();
  if (st.tensors.empty())
    for (const auto& s : now.tensors) st.tensors.push_back(s.tensor.detach().clone());
  else
    for (size_t i = 0; i < now.tensors.size(); ++i) st.tensors[i].copy_(now.tensors[i].tensor);
  st.counts = now.counts;
}

void GroupStates::load(int g) {
  at::NoGradGuard no_grad;
  const auto& st = groups_.at(static_cast<size_t>(g));
  const auto now = live();
  for (size_t i = 0; i < now.tensors.size(); ++i) now.tensors[i].tensor.copy_(st.tensors[i]);
  st.counts.apply_to(opt_);
}

void GroupStates::combine(bool state) {
  at::NoGradGuard no_grad;
  const double n = static_cast<double>(groups_.size());
  const auto now = live();
  for (size_t i = 0; i < now.tensors.size(); ++i) {
    if (now.tensors[i].part != StatePart::Param && !state) continue;
    auto& t = now.tensors[i].tensor;
    t.zero_();
    for (const auto& st : groups_) t.add_(st.tensors[i]);
    t.div_(n);
  }
}

void GroupStates::distribute(bool state) {
  at::NoGradGuard no_grad;
  const auto now = live();
  for (auto& st : groups_) {
    for (size_t i = 0; i < now.tensors.size(); ++i)
      if (now.tensors[i].part == StatePart::Param || state) st.tensors[i].copy_(now.tensors[i].tensor);
    if (state) st.counts = now.counts;
  }
}

}  // namespace fedshard::train
