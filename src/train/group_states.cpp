#include "train/group_states.h"

#include <ATen/core/grad_mode.h>

namespace fedshard::train {

GroupStates::GroupStates(int groups, parallel::ShardedModel& model, optim::Optimizer& opt)
    : model_(model), opt_(opt), groups_(static_cast<size_t>(groups)) {
  for (int g = 0; g < groups; ++g) save(g);
}

std::vector<StateTensor> GroupStates::live() const { return rank_state(model_, opt_, nullptr); }

void GroupStates::save(int g) {
  at::NoGradGuard no_grad;
  auto& st = groups_.at(static_cast<size_t>(g));
  const auto now = live();
  if (st.tensors.empty())
    for (const auto& s : now) st.tensors.push_back(s.tensor.detach().clone());
  else
    for (size_t i = 0; i < now.size(); ++i) st.tensors[i].copy_(now[i].tensor);
  st.steps = opt_.steps();
  st.slice_steps = opt_.slice_steps();
}

void GroupStates::load(int g) {
  at::NoGradGuard no_grad;
  const auto& st = groups_.at(static_cast<size_t>(g));
  const auto now = live();
  for (size_t i = 0; i < now.size(); ++i) now[i].tensor.copy_(st.tensors[i]);
  opt_.set_steps(st.steps);
  opt_.set_slice_steps(st.slice_steps);
}

void GroupStates::combine(bool state) {
  at::NoGradGuard no_grad;
  const double n = static_cast<double>(groups_.size());
  const auto now = live();
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i].key != "param" && !state) continue;
    auto& t = now[i].tensor;
    t.zero_();
    for (const auto& st : groups_) t.add_(st.tensors[i]);
    t.div_(n);
  }
}

void GroupStates::distribute(bool state) {
  at::NoGradGuard no_grad;
  const auto now = live();
  for (auto& st : groups_) {
    for (size_t i = 0; i < now.size(); ++i)
      if (now[i].key == "param" || state) st.tensors[i].copy_(now[i].tensor);
    if (!state) continue;
    st.steps = opt_.steps();
    st.slice_steps = opt_.slice_steps();
  }
}

}  // namespace fedshard::train
